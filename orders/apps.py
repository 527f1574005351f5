from django.apps import AppConfig


class OrdersConfig(AppConfig):
    """Orders and their fulfilment into workloads or reservations."""

    name = "orders"
    verbose_name = "Orders"

    def ready(self) -> None:
        from orders import selectors, services
        from scheduler import hooks

        hooks.on_workload_ended(services.order_close_for_workload)
        hooks.on_reservation_ended(services.order_close_for_reservation)
        hooks.register_approval_threshold(selectors.approval_threshold)
