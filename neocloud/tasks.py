"""Periodic housekeeping of the API layer."""

from celery import shared_task

from neocloud.api.idempotency import idempotency_purge


@shared_task(name="neocloud.idempotency_purge")
def purge_idempotency_records() -> int:
    return idempotency_purge()
