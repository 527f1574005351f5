"""catalog API routes."""

from django.urls import URLPattern, URLResolver
from rest_framework.routers import SimpleRouter

from catalog import api

router = SimpleRouter(trailing_slash=False)
router.register("offerings", api.OfferingViewSet)

urlpatterns: list[URLPattern | URLResolver] = [*router.urls]
