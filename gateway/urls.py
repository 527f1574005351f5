from django.urls import path

from gateway import api, views

# Mounted at /gateway/: Caddy's forward_auth and the console's way in.
urlpatterns = [
    path("auth", views.auth, name="gateway-auth"),
    path("open", views.open_endpoint, name="gateway-open"),
]

# Mounted under /api/v1/.
api_urlpatterns = [
    path("workloads/<uuid:pk>/web-endpoints", api.WebEndpointsView.as_view(), name="web-endpoints"),
    path(
        "workloads/<uuid:pk>/web-endpoints/tokens",
        api.EndpointTokensView.as_view(),
        name="web-endpoint-tokens",
    ),
]
