"""URL map: the health checks, the admin, the versioned API and its OpenAPI schema and docs,
the console, the metrics."""

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularSwaggerView

from gateway.urls import api_urlpatterns as gateway_api
from neocloud import health
from neocloud.api.root import ApiRootView
from neocloud.api.schema_view import SchemaView

api_v1: list[URLPattern | URLResolver] = [
    path("", ApiRootView.as_view(), name="api-root"),
    path("", include("tenants.urls")),
    path("", include("inventory.urls")),
    path("", include("catalog.urls")),
    path("", include("orders.urls")),
    path("", include("scheduler.urls")),
    path("", include("storage.urls")),
    path("", include("execution.urls")),
    path("", include("metering.urls")),
    path("", include("billing.urls")),
    path("", include(gateway_api)),  # web ports (issue 32)
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("metrics", include("monitoring.urls")),
    path("gateway/", include("gateway.urls")),  # Caddy's forward_auth (issue 32)
    path("", include("console.urls")),
]
