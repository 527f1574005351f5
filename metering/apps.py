from django.apps import AppConfig


class MeteringConfig(AppConfig):
    """Usage derived from the allocation events: GPU-seconds by tenant, offering and model."""

    name = "metering"
    verbose_name = "Metering"

    def ready(self) -> None:
        # A spent organization budget with a hard stop refuses new work; the month's usage
        # is what quotas' GPU-hours are enforced against.
        from metering.selectors import budget_refusal, month_usage_by_model
        from scheduler import hooks

        hooks.payment_check.register(budget_refusal)
        hooks.usage_meter.register(month_usage_by_model)
