"""Request validation and response shapes of the tenancy endpoints (no logic here)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import (
    MAX_LIST_ITEMS,
    StrictCharField,
    StrictChoiceField,
    StrictDateTimeField,
    StrictEmailField,
    StrictIntegerField,
    StrictPrimaryKeyRelatedField,
    StrictSlugField,
    StrictUUIDField,
    UniqueListField,
)
from tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Project,
    ProjectsScope,
    Quota,
    Role,
    Scope,
    Secret,
    SshKey,
    User,
)
from tenants.secrets import MAX_SECRET_VALUE_BYTES, MAX_VARIABLE_NAME
from tenants.ssh_keys import MAX_KEY_NAME, MAX_PUBLIC_KEY_CHARS


class OrganizationSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Organization
        fields = ["id", "name", "slug", "billing_email", "status", "created_at"]
        read_only_fields = fields


class OrganizationCreateSerializer(RequestSerializer):
    name = StrictCharField(max_length=200)
    slug = StrictSlugField(max_length=64, required=False, default="")
    billing_email = StrictEmailField(max_length=254, required=False, default="")
    owner_email = StrictEmailField(max_length=254)


class OrganizationUpdateSerializer(RequestSerializer):
    name = StrictCharField(max_length=200, required=False)
    billing_email = StrictEmailField(max_length=254, required=False)


class SuspendSerializer(RequestSerializer):
    reason = StrictCharField(max_length=500)


class ProjectSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Project
        fields = ["id", "organization", "name", "slug", "description", "created_at"]
        read_only_fields = fields


class ProjectCreateSerializer(RequestSerializer):
    organization = StrictPrimaryKeyRelatedField(queryset=Organization.objects.none())
    name = StrictCharField(max_length=200)
    slug = StrictSlugField(max_length=64, required=False, default="")
    description = StrictCharField(max_length=5000, required=False, default="", allow_blank=True)


class ProjectUpdateSerializer(RequestSerializer):
    name = StrictCharField(max_length=200, required=False)
    description = StrictCharField(max_length=5000, required=False, allow_blank=True)


class MembershipSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    email = serializers.EmailField(source="user.email", read_only=True)
    full_name = serializers.CharField(source="user.full_name", read_only=True)
    projects: Any = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = Membership
        fields = [
            "id",
            "organization",
            "user",
            "email",
            "full_name",
            "role",
            "projects_scope",
            "projects",
            "created_at",
        ]
        read_only_fields = fields


class MembershipUpdateSerializer(RequestSerializer):
    role = StrictChoiceField(choices=Role.choices, required=False)
    projects_scope = StrictChoiceField(choices=ProjectsScope.choices, required=False)
    projects = UniqueListField(child=StrictUUIDField(), max_length=MAX_LIST_ITEMS, required=False)


class InvitationSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    state = serializers.CharField(read_only=True)

    class Meta:
        model = Invitation
        fields = [
            "id",
            "organization",
            "email",
            "role",
            "projects_scope",
            "project_ids",
            "state",
            "created_at",
            "expires_at",
        ]
        read_only_fields = fields


class InvitationCreatedSerializer(InvitationSerializer):
    token = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="Shown once; send it to the invitee (null when the response is replayed).",
    )

    class Meta(InvitationSerializer.Meta):
        fields = [*InvitationSerializer.Meta.fields, "token"]
        read_only_fields = fields


class InvitationCreateSerializer(RequestSerializer):
    organization = StrictPrimaryKeyRelatedField(queryset=Organization.objects.none())
    email = StrictEmailField(max_length=254)
    role = StrictChoiceField(choices=Role.choices)
    projects_scope = StrictChoiceField(
        choices=ProjectsScope.choices, required=False, default=ProjectsScope.ALL
    )
    projects = UniqueListField(
        child=StrictUUIDField(), max_length=MAX_LIST_ITEMS, required=False, default=list
    )


class InvitationAcceptSerializer(RequestSerializer):
    token = StrictCharField(max_length=200)


class ApiKeySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "organization",
            "project",
            "user",
            "name",
            "prefix",
            "scopes",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
        ]
        read_only_fields = fields


class ApiKeyCreatedSerializer(ApiKeySerializer):
    secret = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The key itself, shown once: use it as `Authorization: Bearer <secret>`.",
    )

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "secret"]
        read_only_fields = fields


class ApiKeyCreateSerializer(RequestSerializer):
    organization = StrictPrimaryKeyRelatedField(queryset=Organization.objects.none())
    project = StrictPrimaryKeyRelatedField(
        queryset=Project.objects.none(), required=False, allow_null=True, default=None
    )
    name = StrictCharField(max_length=100)
    scopes = UniqueListField(child=StrictChoiceField(choices=Scope.choices), min_length=1)
    expires_at = StrictDateTimeField(required=False, allow_null=True, default=None)


class QuotaSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Quota
        fields = [
            "id",
            "organization",
            "project",
            "gpu_model",
            "max_gpus",
            "monthly_gpu_hours",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class QuotaSetSerializer(RequestSerializer):
    organization = StrictPrimaryKeyRelatedField(queryset=Organization.objects.none())
    project = StrictPrimaryKeyRelatedField(
        queryset=Project.objects.none(), required=False, allow_null=True, default=None
    )
    gpu_model = StrictSlugField(max_length=64)
    max_gpus = StrictIntegerField(min_value=0, max_value=1_000_000)
    monthly_gpu_hours = StrictIntegerField(
        min_value=0, max_value=100_000_000, required=False, allow_null=True, default=None
    )


class SecretSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """A secret as shown: never its value."""

    class Meta:
        model = Secret
        fields = ["id", "organization", "project", "name", "created_at", "updated_at"]
        read_only_fields = fields


class SecretUpdateSerializer(RequestSerializer):
    value = StrictCharField(
        max_length=MAX_SECRET_VALUE_BYTES,
        allow_blank=True,
        trim_whitespace=False,
        write_only=True,
        help_text="write-only: no response shows it",
    )


class SecretCreateSerializer(SecretUpdateSerializer):
    project = StrictPrimaryKeyRelatedField(queryset=Project.objects.none())
    name = StrictCharField(max_length=MAX_VARIABLE_NAME, help_text="the variable's name")


class MeMembershipSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    organization = OrganizationSerializer(read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "organization", "role", "projects_scope"]
        read_only_fields = fields


class MeSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    memberships = serializers.SerializerMethodField()
    api_key = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = ["id", "email", "full_name", "is_staff", "memberships", "api_key"]
        read_only_fields = fields

    def get_memberships(self, user: User) -> list[dict[str, Any]]:
        memberships = self.context["memberships"]
        return list(MeMembershipSerializer(memberships, many=True).data)

    def get_api_key(self, user: User) -> dict[str, Any] | None:
        api_key = self.context.get("api_key")
        return dict(ApiKeySerializer(api_key).data) if api_key else None


class SshKeySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """A registered SSH public key, with its fingerprint as ``ssh-keygen -lf`` prints it."""

    class Meta:
        model = SshKey
        fields = ["id", "name", "public_key", "algorithm", "bits", "fingerprint", "created_at"]
        read_only_fields = fields


class SshKeyCreateSerializer(RequestSerializer):
    public_key = StrictCharField(
        max_length=MAX_PUBLIC_KEY_CHARS,
        trim_whitespace=False,
        help_text="one line of an OpenSSH .pub file: ed25519, ECDSA, or RSA of >= 3072 bits",
    )
    name = StrictCharField(
        max_length=MAX_KEY_NAME,
        required=False,
        allow_blank=True,
        default="",
        help_text="default: the key's comment",
    )
