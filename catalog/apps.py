from django.apps import AppConfig


class CatalogConfig(AppConfig):
    """Offerings a customer can order and their price plans."""

    name = "catalog"
    verbose_name = "Catalog"
