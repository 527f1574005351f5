"""orders API routes."""

from django.urls import URLPattern, URLResolver
from rest_framework.routers import SimpleRouter

from orders import api

router = SimpleRouter(trailing_slash=False)
router.register("orders", api.OrderViewSet)

urlpatterns: list[URLPattern | URLResolver] = [*router.urls]
