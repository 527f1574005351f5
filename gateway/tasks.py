"""Beat: Caddy's routes back to the live endpoints (after a crash, a restart, a lost call)."""

from celery import shared_task

from gateway import services


@shared_task(name="gateway.reconcile")
def reconcile() -> int:
    return services.routes_reconcile()
