from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class EventsConfig(AppConfig):
    name = "events"
    verbose_name = "Event log"

    def ready(self) -> None:
        # Each app declares its event types and projections in these modules; importing them
        # registers them, so the store can validate appends and replay rebuilds every table.
        from events import streams  # noqa: F401  (registers the store's own projection)

        autodiscover_modules("events")
        autodiscover_modules("projections")
