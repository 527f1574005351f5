"""Operators see which secrets a project has and when they were set, never a value."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants import services
from tenants.models import Secret, User
from tests.builders import Builder, run

pytestmark = pytest.mark.django_db

VALUE = "hf_supersecret_value_0xdeadbeef"


def test_the_secret_admin_shows_names_and_times_but_never_the_value(build: Builder) -> None:
    project = build.project(build.organization("Acme"), "Training")
    secret = run(services.secret_create, project=project, name="HF_TOKEN", value=VALUE)
    sealed = Secret.objects.get(pk=secret.pk).sealed
    admin = Client()
    admin.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))

    listing = admin.get("/admin/tenants/secret/")
    page = admin.get(f"/admin/tenants/secret/{secret.pk}/change/")
    searched = admin.get("/admin/tenants/secret/", {"q": VALUE})

    assert listing.status_code == page.status_code == searched.status_code == 200
    assert "HF_TOKEN" in listing.content.decode()
    assert "HF_TOKEN" in page.content.decode()
    assert "0 results" in searched.content.decode()  # a value is not searchable either
    for response in (listing, page):
        assert VALUE not in response.content.decode()
        assert sealed not in response.content.decode()
    assert 'name="_save"' not in page.content.decode()
    assert admin.get("/admin/tenants/secret/add/").status_code == 403
