from django.apps import AppConfig


class MeteringConfig(AppConfig):
    """Usage derived from the allocation events: GPU-seconds by tenant, offering and model."""

    name = "metering"
    verbose_name = "Metering"
