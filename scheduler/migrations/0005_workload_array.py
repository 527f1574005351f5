"""Job arrays: a workload row carries its array, its index in it and the array's size, from
its ``WorkloadSubmitted`` (none for a workload submitted alone)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0004_fragmentation_sample"),
    ]

    operations = [
        migrations.AddField(
            model_name="workload",
            name="array_count",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workload",
            name="array_id",
            field=models.UUIDField(blank=True, db_index=True, null=True),
        ),
        migrations.AddField(
            model_name="workload",
            name="array_index",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
