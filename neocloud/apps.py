from django.apps import AppConfig


class NeoCloudConfig(AppConfig):
    """The project package as an app: it owns the cross-app commands (``bench``)."""

    name = "neocloud"
    verbose_name = "NeoCloud"
