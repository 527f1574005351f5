"""Storage API routes."""

from django.urls import URLPattern, URLResolver
from rest_framework.routers import SimpleRouter

from storage import api

router = SimpleRouter(trailing_slash=False)
router.register("volumes", api.VolumeViewSet)

urlpatterns: list[URLPattern | URLResolver] = [*router.urls]
