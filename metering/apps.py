from django.apps import AppConfig


class MeteringConfig(AppConfig):
    """Usage derived from the allocation events: GPU-seconds by tenant, offering and model."""

    name = "metering"
    verbose_name = "Metering"

    def ready(self) -> None:
        # A spent organization budget with a hard stop refuses new orders.
        from metering.services import budget_refusal
        from orders.hooks import register_payment_check

        register_payment_check(budget_refusal)
