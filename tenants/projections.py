"""The tenancy tables, kept from the organization streams inside each append."""

from __future__ import annotations

from collections.abc import Iterable

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from tenants import events as ev
from tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    OrganizationStatus,
    Project,
    Quota,
    SshKey,
)


class Tenancy(projections.Projection):
    """Organizations and everything that hangs off them. Users are not here: they hold
    credentials, which never enter the log."""

    name = "tenants.tenancy"
    models = (Organization, Project, Membership, Invitation, ApiKey, Quota)
    operational = {ApiKey: ("last_used_at",)}  # telemetry: a key's use is not an event

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        heads: dict[str, int] = {}
        for event in events:
            self.apply(event)
            if event.stream_type == ev.ORGANIZATION_STREAM:
                heads[event.stream_id] = event.version
        # The stream's version: what the next write to the organization must expect.
        for organization_id, version in heads.items():
            Organization.objects.filter(id=organization_id).update(version=version)

    @handles(ev.OrganizationCreated)
    def organization_created(self, event: RecordedEvent) -> None:
        data = event.data
        Organization.objects.create(
            id=data["organization_id"],
            name=data["name"],
            slug=data["slug"],
            billing_email=data["billing_email"],
            status=OrganizationStatus.ACTIVE,
            version=event.version,
            created_at=event.recorded_at,
        )

    @handles(ev.OrganizationUpdated)
    def organization_updated(self, event: RecordedEvent) -> None:
        Organization.objects.filter(id=event.stream_id).update(
            name=event.data["name"], billing_email=event.data["billing_email"]
        )

    @handles(ev.OrganizationSuspended)
    def organization_suspended(self, event: RecordedEvent) -> None:
        Organization.objects.filter(id=event.stream_id).update(status=OrganizationStatus.SUSPENDED)

    @handles(ev.OrganizationReactivated)
    def organization_reactivated(self, event: RecordedEvent) -> None:
        Organization.objects.filter(id=event.stream_id).update(status=OrganizationStatus.ACTIVE)

    @handles(ev.ProjectCreated)
    def project_created(self, event: RecordedEvent) -> None:
        data = event.data
        Project.objects.create(
            id=data["project_id"],
            organization_id=event.stream_id,
            name=data["name"],
            slug=data["slug"],
            description=data["description"],
            created_at=event.recorded_at,
        )

    @handles(ev.ProjectUpdated)
    def project_updated(self, event: RecordedEvent) -> None:
        data = event.data
        Project.objects.filter(id=data["project_id"]).update(
            name=data["name"], description=data["description"]
        )

    @handles(ev.MemberAdded)
    def member_added(self, event: RecordedEvent) -> None:
        data = event.data
        membership = Membership.objects.create(
            id=data["membership_id"],
            organization_id=event.stream_id,
            user_id=data["user_id"],
            role=data["role"],
            projects_scope=data["projects_scope"],
            created_at=event.recorded_at,
        )
        membership.projects.set(data["project_ids"])

    @handles(ev.MemberRoleChanged)
    def member_role_changed(self, event: RecordedEvent) -> None:
        Membership.objects.filter(id=event.data["membership_id"]).update(role=event.data["role"])

    @handles(ev.MemberProjectsChanged)
    def member_projects_changed(self, event: RecordedEvent) -> None:
        membership = Membership.objects.get(id=event.data["membership_id"])
        membership.projects_scope = event.data["projects_scope"]
        membership.save(update_fields=["projects_scope"])
        membership.projects.set(event.data["project_ids"])

    @handles(ev.MemberRemoved)
    def member_removed(self, event: RecordedEvent) -> None:
        membership = Membership.objects.get(id=event.data["membership_id"])
        # A member who leaves takes no working key along.
        ApiKey.objects.filter(
            organization_id=event.stream_id, user_id=membership.user_id, revoked_at__isnull=True
        ).update(revoked_at=event.recorded_at)
        membership.delete()

    @handles(ev.InvitationCreated)
    def invitation_created(self, event: RecordedEvent) -> None:
        data = event.data
        Invitation.objects.create(
            id=data["invitation_id"],
            organization_id=event.stream_id,
            email=data["email"],
            role=data["role"],
            projects_scope=data["projects_scope"],
            project_ids=data["project_ids"],
            token_hash=data["token_hash"],
            invited_by_id=data["invited_by"],
            created_at=event.recorded_at,
            expires_at=data["expires_at"],
        )

    @handles(ev.InvitationAccepted)
    def invitation_accepted(self, event: RecordedEvent) -> None:
        Invitation.objects.filter(id=event.data["invitation_id"]).update(
            accepted_at=event.recorded_at
        )

    @handles(ev.InvitationRevoked)
    def invitation_revoked(self, event: RecordedEvent) -> None:
        Invitation.objects.filter(id=event.data["invitation_id"]).update(
            revoked_at=event.recorded_at
        )

    @handles(ev.ApiKeyCreated)
    def api_key_created(self, event: RecordedEvent) -> None:
        data = event.data
        ApiKey.objects.create(
            id=data["api_key_id"],
            organization_id=event.stream_id,
            project_id=data["project_id"],
            user_id=data["user_id"],
            name=data["name"],
            prefix=data["prefix"],
            key_hash=data["key_hash"],
            scopes=data["scopes"],
            created_at=event.recorded_at,
            expires_at=data["expires_at"],
        )

    @handles(ev.ApiKeyRevoked)
    def api_key_revoked(self, event: RecordedEvent) -> None:
        ApiKey.objects.filter(id=event.data["api_key_id"]).update(revoked_at=event.recorded_at)

    @handles(ev.QuotaSet)
    def quota_set(self, event: RecordedEvent) -> None:
        data = event.data
        limits = {
            "max_gpus": data["max_gpus"],
            "monthly_gpu_hours": data["monthly_gpu_hours"],
            "updated_at": event.recorded_at,
        }
        Quota.objects.update_or_create(
            id=data["quota_id"],
            defaults=limits,
            create_defaults={
                **limits,
                "organization_id": event.stream_id,
                "project_id": data["project_id"],
                "gpu_model": data["gpu_model"],
                "created_at": event.recorded_at,
            },
        )

    @handles(ev.QuotaCleared)
    def quota_cleared(self, event: RecordedEvent) -> None:
        Quota.objects.filter(id=event.data["quota_id"]).delete()


projections.register(Tenancy(), synchronous=True)


class SshKeys(projections.Projection):
    """Users' SSH public keys, from the user streams (issue 32)."""

    name = "tenants.ssh_keys"
    models = (SshKey,)

    @handles(ev.SshKeyAdded)
    def ssh_key_added(self, event: RecordedEvent) -> None:
        data = event.data
        SshKey.objects.create(
            id=data["ssh_key_id"],
            user_id=event.stream_id,
            name=data["name"],
            public_key=data["public_key"],
            algorithm=data["algorithm"],
            bits=data["bits"],
            fingerprint=data["fingerprint"],
            created_at=event.recorded_at,
        )

    @handles(ev.SshKeyRemoved)
    def ssh_key_removed(self, event: RecordedEvent) -> None:
        SshKey.objects.filter(id=event.data["ssh_key_id"]).delete()


projections.register(SshKeys(), synchronous=True)
