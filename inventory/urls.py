from django.urls import path
from rest_framework.routers import SimpleRouter

from inventory import api

router = SimpleRouter(trailing_slash=False)
router.register("gpu-models", api.GpuModelViewSet)
router.register("regions", api.RegionViewSet)
router.register("clusters", api.ClusterViewSet)
router.register("nodes", api.NodeViewSet)

urlpatterns = [
    path("nodes/<str:pk>/heartbeat", api.NodeHeartbeatView.as_view(), name="node-heartbeat"),
    *router.urls,
]
