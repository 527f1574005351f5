"""The organization's forms: they parse; the tenants services decide (rights, owner rules,
slugs, scopes), so a choice a form offers is only what the member's role could use."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from django import forms
from django.db.models import QuerySet

from tenants.models import Project, ProjectsScope, Role


def role_choices(roles: Iterable[str]) -> list[tuple[str, str]]:
    return [(role.value, role.label) for role in Role if role in roles]


class ProjectChoice(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A project by its name (its ``str`` names the organization too: a query each)."""

    def label_from_instance(self, obj: Project) -> str:
        return obj.name


class ProjectsChoice(forms.ModelMultipleChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Project) -> str:
        return obj.name


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=200)
    slug = forms.SlugField(
        max_length=64, required=False, help_text="Optional: made from the name when empty."
    )
    description = forms.CharField(
        max_length=5000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )


class InvitationForm(forms.Form):
    prefix = "invite"  # beside the members' role forms on one page
    email = forms.EmailField(label="E-mail", max_length=254)
    role = forms.ChoiceField()
    projects_scope = forms.ChoiceField(
        label="Projects they see",
        choices=ProjectsScope.choices,
        initial=ProjectsScope.ALL,
        widget=forms.RadioSelect,
        help_text="Selected projects apply to members and viewers.",
    )
    projects = ProjectsChoice(
        queryset=Project.objects.none(), required=False, widget=forms.CheckboxSelectMultiple
    )

    def __init__(
        self, *args: Any, roles: Iterable[str], projects: QuerySet[Project], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        role = cast(forms.ChoiceField, self.fields["role"])
        role.choices, role.initial = role_choices(roles), Role.MEMBER
        self.fields["projects"].queryset = projects  # type: ignore[attr-defined]


class RoleForm(forms.Form):
    role = forms.ChoiceField()

    def __init__(self, *args: Any, roles: Iterable[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["role"]).choices = role_choices(roles)


class ApiKeyForm(forms.Form):
    prefix = "key"
    name = forms.CharField(max_length=100)
    scopes = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    project = ProjectChoice(
        queryset=Project.objects.none(),
        required=False,
        empty_label="The whole organization",
        help_text="A key limited to one project sees and changes that project only.",
    )

    def __init__(
        self, *args: Any, scopes: Iterable[str], projects: QuerySet[Project], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        choices = [(scope, scope) for scope in scopes]
        cast(forms.MultipleChoiceField, self.fields["scopes"]).choices = choices
        self.fields["project"].queryset = projects  # type: ignore[attr-defined]
