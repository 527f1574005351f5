from django.apps import AppConfig


class StorageConfig(AppConfig):
    """Persistent volumes: a project's directories that outlive its runs."""

    name = "storage"
    verbose_name = "Storage"

    def ready(self) -> None:
        from storage import projections  # noqa: F401  (registers the projection)
