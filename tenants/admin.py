"""Operators' admin for tenancy. Every write goes through the services, so it is an event
like any API write; the admin only collects input and shows the result."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tenants import services
from tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Project,
    Quota,
    Secret,
    User,
)
from tenants.service_admin import ReadOnlyServiceAdmin, ServiceAdmin


class OrganizationAddForm(forms.ModelForm):  # type: ignore[type-arg]
    owner_email = forms.EmailField(help_text="Becomes the first owner (created if new).")

    class Meta:
        model = Organization
        fields = ["name", "slug", "billing_email"]


@admin.register(Organization)
class OrganizationAdmin(ServiceAdmin):
    list_display = ("slug", "name", "status", "billing_email", "created_at")
    list_filter = ("status",)
    search_fields = ("slug", "name", "billing_email")
    readonly_fields = ("id", "slug", "status", "version", "created_at")
    fields = ("id", "name", "slug", "billing_email", "status", "version", "created_at")
    actions = ["suspend", "reactivate"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = OrganizationAddForm
            kwargs["fields"] = ["name", "slug", "billing_email", "owner_email"]
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["name", "slug", "billing_email", "owner_email"]
        return super().get_fields(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Organization, form: Any, change: bool) -> None:
        if change:
            saved = self.run(
                request,
                services.organization_update,
                organization=obj,
                name=obj.name,
                billing_email=obj.billing_email,
            )
        else:
            saved, _owner = self.run(
                request,
                services.organization_create_with_owner,
                name=obj.name,
                slug=obj.slug,
                billing_email=obj.billing_email,
                owner_email=form.cleaned_data["owner_email"],
            )
        obj.pk = saved.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Suspend (reads only, nothing new starts)")
    def suspend(self, request: HttpRequest, queryset: QuerySet[Organization]) -> None:
        for organization in queryset:
            self.run(
                request,
                services.organization_suspend,
                organization=organization,
                reason=f"suspended by operator {request.user}",
            )
        messages.success(request, f"{queryset.count()} suspended")

    @admin.action(description="Reactivate")
    def reactivate(self, request: HttpRequest, queryset: QuerySet[Organization]) -> None:
        self.run_each(request, services.organization_reactivate, queryset, "organization")


@admin.register(Project)
class ProjectAdmin(ServiceAdmin):
    list_display = ("slug", "name", "organization", "created_at")
    list_filter = ("organization",)
    search_fields = ("slug", "name", "organization__slug")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["organization", "name", "slug", "description"]
        return ["organization", "slug", "name", "description", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else ("organization", "slug", "created_at")

    def save_model(self, request: HttpRequest, obj: Project, form: Any, change: bool) -> None:
        if change:
            saved = self.run(
                request,
                services.project_update,
                project=obj,
                name=obj.name,
                description=obj.description,
            )
        else:
            saved = self.run(
                request,
                services.project_create,
                organization=obj.organization,
                name=obj.name,
                slug=obj.slug,
                description=obj.description,
            )
        obj.pk = saved.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Membership)
class MembershipAdmin(ServiceAdmin):
    list_display = ("user", "organization", "role", "projects_scope", "created_at")
    list_filter = ("role", "organization")
    search_fields = ("user__email", "organization__slug")
    fields = ("organization", "user", "role", "projects_scope", "created_at")
    readonly_fields = ("organization", "user", "projects_scope", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # members join through invitations

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        self.run(request, services.member_change_role, membership=obj, role=obj.role)

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        self.run(request, services.member_remove, membership=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        self.run_each(request, services.member_remove, queryset, "membership")


@admin.register(Invitation)
class InvitationAdmin(ReadOnlyServiceAdmin):
    list_display = (
        "email",
        "organization",
        "role",
        "created_at",
        "expires_at",
        "accepted_at",
        "revoked_at",
    )
    list_filter = ("role", "organization")
    search_fields = ("email", "organization__slug")
    exclude = ("token_hash",)
    actions = ["revoke"]

    @admin.action(description="Revoke")
    def revoke(self, request: HttpRequest, queryset: QuerySet[Invitation]) -> None:
        self.run_each(request, services.invitation_revoke, queryset, "invitation")


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyServiceAdmin):
    list_display = (
        "prefix",
        "name",
        "user",
        "organization",
        "project",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    list_filter = ("organization",)
    search_fields = ("prefix", "name", "user__email", "organization__slug")
    exclude = ("key_hash",)
    actions = ["revoke"]

    @admin.action(description="Revoke (401 from the next request on)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        self.run_each(request, services.api_key_revoke, queryset, "api_key")


@admin.register(Secret)
class SecretAdmin(ReadOnlyServiceAdmin):
    """Which secrets a project has, and when each was set: never the value, sealed or not
    (``sealed`` is in no list, form or search)."""

    list_display = ("name", "project", "organization", "created_at", "updated_at")
    list_filter = ("organization",)
    search_fields = ("name", "project__slug", "organization__slug")
    fields = ("name", "organization", "project", "created_at", "updated_at")
    readonly_fields = fields


@admin.register(Quota)
class QuotaAdmin(ServiceAdmin):
    list_display = (
        "organization",
        "project",
        "gpu_model",
        "max_gpus",
        "monthly_gpu_hours",
        "updated_at",
    )
    list_filter = ("gpu_model", "organization")
    search_fields = ("organization__slug", "project__slug", "gpu_model")
    fields = ("organization", "project", "gpu_model", "max_gpus", "monthly_gpu_hours")

    def save_model(self, request: HttpRequest, obj: Quota, form: Any, change: bool) -> None:
        saved = self.run(
            request,
            services.quota_set,
            organization=obj.organization,
            project=obj.project,
            gpu_model=obj.gpu_model,
            max_gpus=obj.max_gpus,
            monthly_gpu_hours=obj.monthly_gpu_hours,
        )
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Quota) -> None:
        self.run(request, services.quota_clear, quota=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Quota]) -> None:
        self.run_each(request, services.quota_clear, queryset, "quota")


class UserAddForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = User
        fields = ["email", "full_name", "is_staff"]


@admin.register(User)
class UserAdmin(ServiceAdmin):
    list_display = ("email", "full_name", "is_staff", "is_active", "date_joined")
    list_filter = ("is_staff", "is_active")
    search_fields = ("email", "full_name")
    fields = ("email", "full_name", "is_staff", "is_active", "date_joined", "last_login")
    readonly_fields = ("email", "date_joined", "last_login")

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = UserAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["email", "full_name", "is_staff"] if obj is None else self.fields

    def save_model(self, request: HttpRequest, obj: User, form: Any, change: bool) -> None:
        if change:
            self.run(
                request,
                services.user_update,
                user=obj,
                full_name=obj.full_name,
                is_staff=obj.is_staff,
                is_active=obj.is_active,
            )
        else:
            saved = self.run(
                request,
                services.user_register,
                email=obj.email,
                full_name=obj.full_name,
                is_staff=obj.is_staff,
            )
            obj.pk = saved.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deactivate instead: memberships and the log refer to users
