"""Reservations record when they were cancelled (billing charges a reservation unless it was
cancelled before its window began); those cancelled already take the time of their
``ReservationCancelled`` event, as a replay would give them."""

from django.db import migrations, models
from django.db.models import CharField, OuterRef, Subquery
from django.db.models.functions import Cast

from scheduler import events as ev


def cancelled_at_from_log(apps, schema_editor):  # type: ignore[no-untyped-def]
    event = apps.get_model("events", "Event")
    reservation = apps.get_model("scheduler", "Reservation")
    first_cancel = event.objects.filter(
        stream_type=ev.RESERVATION_STREAM,
        stream_id=Cast(OuterRef("id"), CharField()),
        type=ev.ReservationCancelled.event_type,
    ).order_by("position")
    reservation.objects.filter(status="cancelled", cancelled_at__isnull=True).update(
        cancelled_at=Subquery(first_cancel.values("recorded_at")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("events", "0003_append_lock_and_notify"),
        ("scheduler", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="reservation",
            name="cancelled_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(cancelled_at_from_log, migrations.RunPython.noop, elidable=True),
    ]
