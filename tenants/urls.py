from django.urls import path
from rest_framework.routers import SimpleRouter

from tenants import api

router = SimpleRouter(trailing_slash=False)
router.register("organizations", api.OrganizationViewSet)
router.register("projects", api.ProjectViewSet)
router.register("members", api.MembershipViewSet)
router.register("invitations", api.InvitationViewSet)
router.register("api-keys", api.ApiKeyViewSet)
router.register("quotas", api.QuotaViewSet)
router.register("secrets", api.SecretViewSet)
router.register("ssh-keys", api.SshKeyViewSet)

urlpatterns = [path("me", api.MeView.as_view(), name="me"), *router.urls]
