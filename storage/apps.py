from django.apps import AppConfig


class StorageConfig(AppConfig):
    """Persistent volumes: a project's directories that outlive its runs."""

    name = "storage"
    verbose_name = "Storage"

    def ready(self) -> None:
        from inventory import hooks
        from storage import (
            projections,  # noqa: F401  (registers the projection)
            services,
        )

        hooks.volumes_measured.register(services.volumes_usage_record)
