"""URL map: the admin, the versioned API and its OpenAPI schema and docs."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from neocloud.api.errors import json_not_found, json_server_error
from neocloud.api.root import ApiRootView

api_v1 = [
    path("", ApiRootView.as_view(), name="api-root"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    """JSON under ``/api/``, never an HTML page; Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return json_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return json_server_error(request)
    return defaults.server_error(request)
