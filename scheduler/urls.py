"""Scheduler API routes."""

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from scheduler import api

router = SimpleRouter(trailing_slash=False)
router.register("workloads", api.WorkloadViewSet)
router.register("reservations", api.ReservationViewSet)
router.register("queues", api.QueueViewSet, basename="queue")

urlpatterns: list[URLPattern | URLResolver] = [
    path("capacity", api.CapacityView.as_view(), name="scheduler-capacity"),
    path("clusters/<str:pk>/what-if", api.ClusterWhatIfView.as_view(), name="cluster-what-if"),
    *router.urls,
]
