"""Metering API routes."""

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from metering import api

router = SimpleRouter(trailing_slash=False)
router.register("budgets", api.BudgetViewSet)

urlpatterns: list[URLPattern | URLResolver] = [
    path("usage", api.UsageView.as_view(), name="usage"),
    path("usage.csv", api.UsageView.as_view(), {"format": "csv"}, name="usage-csv"),
    path("usage/daily", api.UsageDailyView.as_view(), name="usage-daily"),
    *router.urls,
]
