from django.apps import AppConfig


class OrdersConfig(AppConfig):
    """Orders and their fulfilment into workloads or reservations."""

    name = "orders"
    verbose_name = "Orders"
