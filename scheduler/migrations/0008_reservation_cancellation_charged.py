"""Reservations record whether their cancellation is charged (the window stays billed).
Those cancelled already were charged exactly when cancelled after their window began, as a
replay of their ``ReservationCancelled`` (which carries no ``charged``) gives them."""

from django.db import migrations, models
from django.db.models import ExpressionWrapper, F, Q


def charged_as_before(apps, schema_editor):  # type: ignore[no-untyped-def]
    reservation = apps.get_model("scheduler", "Reservation")
    reservation.objects.filter(status="cancelled").update(
        cancellation_charged=ExpressionWrapper(
            Q(cancelled_at__gt=F("starts_at")), output_field=models.BooleanField()
        )
    )


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0007_workload_cluster_submitted")]

    operations = [
        migrations.AddField(
            model_name="reservation",
            name="cancellation_charged",
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.RunPython(charged_as_before, migrations.RunPython.noop, elidable=True),
    ]
