"""Tenancy endpoints. Views validate, call one service, and render."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.filterset import filterset_factory
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.viewsets import GenericViewSet

from events.serializers import AuditEventSerializer
from neocloud.api.idempotency import idempotent
from neocloud.api.pagination import Cursor
from neocloud.core.transactions import atomic_with_retry
from tenants import selectors, services
from tenants import serializers as s
from tenants.access import Action, Actor
from tenants.actor import actor_for
from tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Project,
    Quota,
    Secret,
    SshKey,
)
from tenants.viewsets import TenantViewSet


class AuditCursor(CursorPagination):
    ordering = "-position"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class OrganizationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Organizations the caller belongs to (operators: all)."""

    queryset = Organization.objects.all()
    serializer_class = s.OrganizationSerializer
    read_action = Action.ORGANIZATION_READ
    filterset_class = filterset_factory(Organization, fields=["status", "slug"])
    ordering_fields = ["slug", "created_at"]

    @extend_schema(
        request=s.OrganizationCreateSerializer, responses={201: s.OrganizationSerializer}
    )
    @idempotent()
    def create(self, request: Request) -> Response:
        """Operators create a customer organization with its first owner."""
        data = self.validated(s.OrganizationCreateSerializer, request.data)
        organization, _owner = self.perform(services.organization_create_with_owner, **data)
        return Response(s.OrganizationSerializer(organization).data, status=201)

    @extend_schema(request=s.OrganizationUpdateSerializer, responses=s.OrganizationSerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        data = self.validated(s.OrganizationUpdateSerializer, request.data)
        organization = self.perform(
            services.organization_update, organization=self.get_object(), **data
        )
        return Response(s.OrganizationSerializer(organization).data)

    @extend_schema(request=s.SuspendSerializer, responses=s.OrganizationSerializer)
    @action(detail=True, methods=["post"])
    def suspend(self, request: Request, pk: str) -> Response:
        """Operators: the organization keeps reading but starts nothing new."""
        data = self.validated(s.SuspendSerializer, request.data)
        organization = self.perform(
            services.organization_suspend, organization=self.get_object(), **data
        )
        return Response(s.OrganizationSerializer(organization).data)

    @extend_schema(request=None, responses=s.OrganizationSerializer)
    @action(detail=True, methods=["post"])
    def reactivate(self, request: Request, pk: str) -> Response:
        organization = self.perform(
            services.organization_reactivate, organization=self.get_object()
        )
        return Response(s.OrganizationSerializer(organization).data)

    @extend_schema(responses=AuditEventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=AuditCursor, filter_backends=[])
    def events(self, request: Request, pk: str) -> Response:
        """The organization's audit feed: every event recorded for it, newest first."""
        feed = selectors.audit_feed(actor=self.actor, organization=self.get_object())
        page = self.paginate_queryset(feed)
        return self.get_paginated_response(AuditEventSerializer(page, many=True).data)


class ProjectViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    queryset = Project.objects.all()
    serializer_class = s.ProjectSerializer
    read_action = Action.PROJECT_READ
    filterset_class = filterset_factory(Project, fields=["organization", "slug"])
    ordering_fields = ["slug", "created_at"]

    @extend_schema(request=s.ProjectCreateSerializer, responses={201: s.ProjectSerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        data = self.validated(s.ProjectCreateSerializer, request.data)
        project = self.perform(services.project_create, **data)
        return Response(s.ProjectSerializer(project).data, status=201)

    @extend_schema(request=s.ProjectUpdateSerializer, responses=s.ProjectSerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        data = self.validated(s.ProjectUpdateSerializer, request.data)
        project = self.perform(services.project_update, project=self.get_object(), **data)
        return Response(s.ProjectSerializer(project).data)


class MembershipViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Members of the caller's organizations. Invite through ``/invitations``."""

    queryset = Membership.objects.select_related("user").prefetch_related("projects")
    serializer_class = s.MembershipSerializer
    read_action = Action.MEMBER_READ
    filterset_class = filterset_factory(Membership, fields=["organization", "role"])
    ordering_fields = ["created_at", "role"]

    @extend_schema(request=s.MembershipUpdateSerializer, responses=s.MembershipSerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        """Change a member's role, or the projects they see."""
        data = self.validated(s.MembershipUpdateSerializer, request.data)
        membership = self.get_object()
        if "role" in data:
            membership = self.perform(
                services.member_change_role, membership=membership, role=data["role"]
            )
        if "projects_scope" in data or "projects" in data:
            membership = self.perform(
                services.member_set_projects,
                membership=membership,
                projects_scope=data.get("projects_scope", membership.projects_scope),
                project_ids=data.get("projects", []),
            )
        return Response(s.MembershipSerializer(membership).data)

    def destroy(self, request: Request, pk: str) -> Response:
        """Remove a member (or leave); their API keys in the organization are revoked."""
        self.perform(services.member_remove, membership=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    queryset = Invitation.objects.all()
    serializer_class = s.InvitationSerializer
    read_action = Action.MEMBER_MANAGE
    filterset_class = filterset_factory(Invitation, fields=["organization", "email"])
    ordering_fields = ["created_at"]

    @extend_schema(
        request=s.InvitationCreateSerializer, responses={201: s.InvitationCreatedSerializer}
    )
    @idempotent(redact={"token"})
    def create(self, request: Request) -> Response:
        """Invite someone by e-mail; the token in the response is shown once."""
        data = self.validated(s.InvitationCreateSerializer, request.data)
        invitation, token = self.perform(
            services.invitation_create,
            organization=data["organization"],
            email=data["email"],
            role=data["role"],
            projects_scope=data["projects_scope"],
            project_ids=data["projects"],
        )
        body = s.InvitationCreatedSerializer(invitation).data | {"token": token}
        return Response(body, status=201)

    def destroy(self, request: Request, pk: str) -> Response:
        """Revoke a pending invitation."""
        self.perform(services.invitation_revoke, invitation=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.InvitationAcceptSerializer, responses=s.MembershipSerializer)
    @action(detail=False, methods=["post"])
    def accept(self, request: Request) -> Response:
        """Join with a token, signed in with the invited e-mail address."""
        data = self.validated(s.InvitationAcceptSerializer, request.data)
        membership = self.perform(services.invitation_accept, token=data["token"])
        return Response(s.MembershipSerializer(membership).data)


class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """The caller's own keys; owners and admins see every key of their organization."""

    queryset = ApiKey.objects.all()
    serializer_class = s.ApiKeySerializer
    read_action = Action.API_KEY_MANAGE
    filterset_class = filterset_factory(ApiKey, fields=["organization", "project", "user"])
    ordering_fields = ["created_at", "last_used_at"]

    def get_queryset(self) -> QuerySet[Any]:
        return selectors.api_key_list(actor=self.actor)

    @extend_schema(request=s.ApiKeyCreateSerializer, responses={201: s.ApiKeyCreatedSerializer})
    @idempotent(redact={"secret"})
    def create(self, request: Request) -> Response:
        """Create a key for yourself; its secret is in this response only."""
        data = self.validated(s.ApiKeyCreateSerializer, request.data)
        api_key, secret = self.perform(services.api_key_create, **data)
        body = s.ApiKeyCreatedSerializer(api_key).data | {"secret": secret}
        return Response(body, status=201)

    @extend_schema(request=None, responses=s.ApiKeySerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        """Revoke at once: the next request with the key is 401."""
        api_key = self.perform(services.api_key_revoke, api_key=self.get_object())
        return Response(s.ApiKeySerializer(api_key).data)


class QuotaViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Quotas per organization or project and GPU model; operators set them."""

    queryset = Quota.objects.all()
    serializer_class = s.QuotaSerializer
    read_action = Action.QUOTA_READ
    filterset_class = filterset_factory(Quota, fields=["organization", "project", "gpu_model"])
    ordering_fields = ["gpu_model", "updated_at"]

    @extend_schema(request=s.QuotaSetSerializer, responses={201: s.QuotaSerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        """Set (create or replace) the quota of an organization, or of one of its projects."""
        data = self.validated(s.QuotaSetSerializer, request.data)
        quota = self.perform(services.quota_set, **data)
        return Response(s.QuotaSerializer(quota).data, status=201)

    def destroy(self, request: Request, pk: str) -> Response:
        self.perform(services.quota_clear, quota=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class SecretViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """A project's secrets, for its workloads' variables (``secrets`` of a workload). Values
    are write-only: no response, stored idempotent reply, event or log line holds one."""

    queryset = Secret.objects.all()
    serializer_class = s.SecretSerializer
    read_action = Action.SECRET_READ
    filterset_class = filterset_factory(Secret, fields=["organization", "project", "name"])
    ordering_fields = ["name", "created_at", "updated_at"]

    @extend_schema(request=s.SecretCreateSerializer, responses={201: s.SecretSerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        data = self.validated(s.SecretCreateSerializer, request.data)
        secret = self.perform(services.secret_create, **data)
        return Response(s.SecretSerializer(secret).data, status=201)

    @extend_schema(request=s.SecretUpdateSerializer, responses=s.SecretSerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        """Set a new value (the name stays: workloads refer to it)."""
        data = self.validated(s.SecretUpdateSerializer, request.data)
        secret = self.perform(services.secret_update, secret=self.get_object(), **data)
        return Response(s.SecretSerializer(secret).data)

    def destroy(self, request: Request, pk: str) -> Response:
        self.perform(services.secret_delete, secret=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class SshKeyViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    GenericViewSet,  # type: ignore[type-arg]
):
    """The caller's own SSH public keys, authorized on the runs (``ssh: true``) of every
    project they may run work in."""

    queryset = SshKey.objects.all()
    serializer_class = s.SshKeySerializer
    permission_classes = [IsAuthenticated]
    pagination_class = Cursor

    @property
    def actor(self) -> Actor:
        return actor_for(self.request)

    def get_queryset(self) -> QuerySet[Any]:
        return selectors.ssh_key_list(actor=self.actor)

    @extend_schema(request=s.SshKeyCreateSerializer, responses={201: s.SshKeySerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        """Register a public key; a private key is refused (``ssh_key_private``)."""
        body = s.SshKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = atomic_with_retry(services.ssh_key_add, actor=self.actor, **body.validated_data)
        return Response(s.SshKeySerializer(key).data, status=201)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        atomic_with_retry(services.ssh_key_remove, actor=self.actor, ssh_key=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(APIView):
    """Who the caller is: user, memberships, and the API key in use."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        actor = actor_for(request)
        memberships = selectors.memberships_shown(actor=actor)
        context = {"memberships": memberships, "api_key": actor.api_key}
        return Response(s.MeSerializer(actor.user, context=context).data)
