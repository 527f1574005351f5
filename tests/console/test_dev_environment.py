"""The console's "Start a GPU dev environment" (issue 32): the button on the workloads page,
a form of GPU model and count, image and idle stop, a workload of kind dev submitted through
the API's service, and its page with the SSH section; a bad idle stop writes nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.models import Workload
from tests.console.conftest import Member
from tests.scheduler.conftest import ready_fleet

pytestmark = pytest.mark.django_db


def _client(member: Member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def test_a_dev_environment_starts_from_the_workloads_page(member: Member) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(member)
    assert b"Start a GPU dev environment" in client.get("/workloads").content

    response = client.post(
        "/workloads/new-dev",
        {"project": str(member.project.pk), "name": "box", "gpu_model": "h100", "gpus": "2",
         "image": "", "idle_stop_min": "30"},
        follow=True,
    )  # fmt: skip

    assert response.status_code == 200
    workload = Workload.objects.get()
    assert (workload.kind, workload.ssh, workload.idle_stop_s) == ("dev", True, 1800.0)
    assert (workload.gpu_models, workload.gpus_per_node) == (["h100"], 2)
    assert workload.command == ["sleep", "infinity"]
    assert b"<h2>SSH</h2>" in response.content


def test_a_bad_idle_stop_is_refused_and_nothing_is_submitted(member: Member) -> None:
    ready_fleet(nodes=1, gpus=8)

    response = _client(member).post(
        "/workloads/new-dev",
        {"project": str(member.project.pk), "name": "box", "gpu_model": "h100", "gpus": "1",
         "image": "", "idle_stop_min": "0"},
    )  # fmt: skip

    assert response.status_code == 400
    assert b"idle_stop_s" in response.content
    assert not Workload.objects.exists()
