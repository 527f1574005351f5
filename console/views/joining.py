"""Joining: accepting an invitation by its link (making the account when there is none),
self sign-up where the operator allows it."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
