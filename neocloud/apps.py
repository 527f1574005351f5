from django.apps import AppConfig

from neocloud.core.logs import structlog_configure


class NeoCloudConfig(AppConfig):
    """The project package as an app: it owns the cross-app commands (``bench``)."""

    name = "neocloud"
    verbose_name = "NeoCloud"

    def ready(self) -> None:
        structlog_configure()
