"""Tenancy tables.

Everything but ``User`` is a projection of the organization streams (``projections.py``) and
is rebuilt by ``manage.py replay``. ``User`` holds credentials, which never enter the log: its
rows are written by ``services.user_register`` beside a ``UserRegistered`` event. ``Secret``
likewise: its sealed values never enter the log, so its rows are written by
``services.secret_create`` and the like beside ``SecretSet``/``SecretDeleted`` events.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models
from django.utils import timezone


class Role(models.TextChoices):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"
    BILLING = "billing"


class Scope(models.TextChoices):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


class OrganizationStatus(models.TextChoices):
    ACTIVE = "active"
    SUSPENDED = "suspended"


class ProjectsScope(models.TextChoices):
    """Which projects of the organization a member sees."""

    ALL = "all"
    SELECTED = "selected"


class InvitationState(models.TextChoices):
    """Where an invitation stands (``Invitation.state``): only a pending one can be used."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    REVOKED = "revoked"
    EXPIRED = "expired"


class TenantPath:
    """Where a model's organization (and project) live, for the one tenant-scoping mechanism
    (``tenants.access.Actor.scope``)."""

    def __init__(self, organization: str, project: str | None = None) -> None:
        self.organization = organization
        self.project = project


class UserManager(BaseUserManager["User"]):
    def create_user(self, email: str, password: str | None = None, **extra: Any) -> User:
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)  # None: an unusable password until one is set
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **extra: Any) -> User:
        return self.create_user(email, password, is_staff=True, is_superuser=True, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """A person. Logs in with an e-mail address; ``is_staff`` makes an operator."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    email = models.EmailField(unique=True)
    full_name = models.CharField(max_length=200, blank=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=timezone.now)
    # None: signed up and not yet verified (``Actor.require`` lets them read only). Every
    # other way in proves the address or is an operator's: verified when made.
    email_verified_at = models.DateTimeField(null=True, blank=True, default=timezone.now)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    def __str__(self) -> str:
        return self.email


class Organization(models.Model):
    """The tenant. ``version`` is its stream's version, for optimistic concurrency."""

    id = models.UUIDField(primary_key=True)
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    billing_email = models.EmailField()
    status = models.CharField(max_length=16, choices=OrganizationStatus.choices)
    version = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    tenancy = TenantPath(organization="id")

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def is_active(self) -> bool:
        return self.status == OrganizationStatus.ACTIVE


class Project(models.Model):
    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization", project="id")

    class Meta:
        ordering = ["organization", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="project_slug_per_org"),
        ]
        # Lists page by creation time within an organization.
        indexes = [models.Index(fields=["organization", "created_at"], name="project_org_created")]

    def __str__(self) -> str:
        return f"{self.organization.slug}/{self.slug}"


class Membership(models.Model):
    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    projects_scope = models.CharField(
        max_length=16, choices=ProjectsScope.choices, default=ProjectsScope.ALL
    )
    projects = models.ManyToManyField(Project, blank=True, related_name="+")
    created_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization")

    class Meta:
        ordering = ["organization", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="one_membership_per_org"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} as {self.role}"


class Invitation(models.Model):
    """An invitation to join; only the token's hash is kept."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices)
    projects_scope = models.CharField(max_length=16, choices=ProjectsScope.choices)
    project_ids = models.JSONField(default=list)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    tenancy = TenantPath(organization="organization")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.email} to {self.organization}"

    @property
    def state(self) -> InvitationState:
        if self.accepted_at:
            return InvitationState.ACCEPTED
        if self.revoked_at:
            return InvitationState.REVOKED
        if self.expires_at <= timezone.now():
            return InvitationState.EXPIRED
        return InvitationState.PENDING


class ApiKey(models.Model):
    """A user's key in one organization (optionally one project). Only a hash is stored."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, null=True, blank=True)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    scopes = models.JSONField()
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Telemetry, not business state: written in place (at most once a minute), not an event.
    last_used_at = models.DateTimeField(null=True, blank=True)

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix} ({self.name})"

    def is_usable(self, now: Any = None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class Quota(models.Model):
    """Per organization, or per project, and per GPU model: enforced by the scheduler."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, null=True, blank=True)
    gpu_model = models.SlugField(max_length=64)
    max_gpus = models.PositiveIntegerField()
    monthly_gpu_hours = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["organization", "project", "gpu_model"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "gpu_model"],
                condition=models.Q(project__isnull=True),
                name="one_org_quota_per_model",
            ),
            models.UniqueConstraint(
                fields=["project", "gpu_model"],
                condition=models.Q(project__isnull=False),
                name="one_project_quota_per_model",
            ),
        ]

    def __str__(self) -> str:
        scope = self.project or self.organization
        return f"{scope}: {self.max_gpus} x {self.gpu_model}"


class Secret(models.Model):
    """A value of a project's, handed to its workloads as a variable of ``name``. ``sealed``
    is the value encrypted with ``SECRETS_KEYS`` (``tenants.secrets.seal``); the plain value
    is in no table, no event, no response and no log."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    name = models.CharField(max_length=128)
    sealed = models.TextField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="one_secret_per_name"),
        ]

    def __str__(self) -> str:
        return self.name


# --- SSH keys (issue 32) -------------------------------------------------------------------


class SshKey(models.Model):
    """A user's SSH public key, authorized on the runs (``ssh: true``) of every project the
    user is a member of. A projection of the user's stream (``SshKeyAdded``/``SshKeyRemoved``):
    public material only."""

    id = models.UUIDField(primary_key=True)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100)
    public_key = models.TextField()
    algorithm = models.CharField(max_length=64)
    bits = models.PositiveIntegerField()
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["user", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="one_ssh_key_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"
