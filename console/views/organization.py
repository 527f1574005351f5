"""The organization: projects, members and roles, invitations, API keys, the audit feed."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
