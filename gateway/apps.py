from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """Web ports through a reverse proxy (Caddy): a route per endpoint, kept equal to the
    live endpoints, and every request authorized by NeoCloud (``/gateway/auth``)."""

    name = "gateway"
    verbose_name = "Web gateway"

    def ready(self) -> None:
        from gateway import projections, services  # noqa: F401  (registers the projection)
        from scheduler import hooks

        hooks.workload_ended.register(lambda workload: services.routes_sync(workload.pk))
        hooks.endpoints_changed.register(services.routes_sync)
