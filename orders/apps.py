from django.apps import AppConfig


class OrdersConfig(AppConfig):
    """Orders and their fulfilment into workloads or reservations."""

    name = "orders"
    verbose_name = "Orders"

    def ready(self) -> None:
        from orders import selectors, services
        from scheduler import hooks

        hooks.workload_ended.register(services.order_close_for_workload)
        hooks.reservation_ended.register(services.order_close_for_reservation)
        hooks.approval_threshold.register(selectors.approval_threshold)
        hooks.offering_workload_spec.register(services.workload_spec_for_offering)
