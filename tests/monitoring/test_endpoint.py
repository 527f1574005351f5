"""Who may scrape ``/metrics``, and the request timing it shows."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import Builder

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-scrape-token"


@override_settings(METRICS_TOKEN=TOKEN)
@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        pytest.param(None, 401, id="no-token"),
        pytest.param("Bearer wrong", 401, id="wrong-token"),
        pytest.param(f"Basic {TOKEN}", 401, id="not-bearer"),
        pytest.param(f"Bearer {TOKEN}", 200, id="the-token"),
    ],
)
def test_with_a_token_only_its_bearer_scrapes(authorization: str | None, status: int) -> None:
    headers = {"Authorization": authorization} if authorization else {}

    response = Client().get("/metrics", headers=headers)

    assert response.status_code == status
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"neocloud_" not in response.content
    else:
        assert response["Content-Type"].startswith("text/plain")
        assert b"# TYPE neocloud_cluster_gpus gauge" in response.content


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_IPS=["127.0.0.1", "::1"])
@pytest.mark.parametrize(
    ("peer", "status"),
    [
        pytest.param("127.0.0.1", 200, id="loopback"),
        pytest.param("::1", 200, id="loopback-v6"),
        pytest.param("10.1.2.3", 403, id="elsewhere"),
    ],
)
def test_without_a_token_only_the_allowed_peers_scrape(peer: str, status: int) -> None:
    assert Client(REMOTE_ADDR=peer).get("/metrics").status_code == status


def _request_count(client: Client) -> float:
    text = client.get("/metrics").content.decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "neocloud_api_request_duration_seconds_count" and sample.labels == {
                "route": "/api/v1/",
                "method": "GET",
                "status": "200",
            }:
                return sample.value
    return 0.0


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_IPS=["127.0.0.1"])
def test_a_request_is_timed_by_its_route_method_and_status() -> None:
    client = Client()
    before = _request_count(client)

    assert client.get("/api/v1/").status_code == 200

    assert _request_count(client) == before + 1


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_IPS=[])
def test_with_neither_a_token_nor_named_peers_nobody_scrapes() -> None:
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")

    assert response.status_code == 403
    assert b"set METRICS_TOKEN" in response.content


@pytest.mark.parametrize("labels", [True, False])
def test_tenants_names_are_labels_only_when_the_operator_opts_in(
    build: Builder, labels: bool
) -> None:
    build.project(build.organization("Secretive Corp"), "stealth-project")

    with override_settings(METRICS_TENANT_LABELS=labels):
        text = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()

    assert ("stealth-project" in text) is labels
    assert ("secretive-corp" in text) is labels
