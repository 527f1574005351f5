"""An offering may say what its workloads run (image, command, env, working_dir, ports): a
workload or order against it takes each where its request gives none; the defaults are held to
a workload's bounds and load from a catalog file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from catalog import services
from catalog.models import Offering
from events.models import Event
from neocloud.core.errors import ApplicationError
from scheduler.models import Workload
from tests.builders import Builder, client_with_key, run
from tests.builders import commerce as shop_builders

pytestmark = pytest.mark.django_db

DEFAULTS: dict[str, Any] = {
    "image": "ghcr.io/acme/serve:1.2",
    "command": ["serve", "--port", "8000"],
    "env": {"MODE": "prod"},
    "working_dir": "/srv",
    "ports": [8000],
}


@pytest.fixture
def customer(build: Builder) -> shop_builders.Customer:
    shop_builders.shop()
    served = shop_builders.offering("h100-serve", "instance", **DEFAULTS)
    shop_builders.price(served, "on_demand", 250)
    return shop_builders.customer(build)


def _against_the_offering(customer: shop_builders.Customer, **body: Any) -> Workload:
    response = client_with_key(customer.keys["owner"]).post(
        "/api/v1/workloads",
        {
            "project": str(customer.project.pk),
            "name": "svc",
            "offering": "h100-serve",
            "region": shop_builders.REGION,
            **body,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    return Workload.objects.get(pk=response.json()["id"])


def test_a_workload_against_an_offering_runs_its_defaults(
    customer: shop_builders.Customer,
) -> None:
    workload = _against_the_offering(customer)

    assert (workload.image, workload.command, workload.env) == (
        DEFAULTS["image"],
        DEFAULTS["command"],
        DEFAULTS["env"],
    )
    assert (workload.working_dir, workload.ports) == ("/srv", [8000])


def test_the_requests_own_fields_win(customer: shop_builders.Customer) -> None:
    workload = _against_the_offering(customer, command=["serve", "--debug"], env={})

    assert workload.command == ["serve", "--debug"]
    assert workload.env == {}  # given, if empty
    assert workload.image == DEFAULTS["image"]  # not given: the offering's


def test_an_order_takes_the_defaults_and_records_them(customer: shop_builders.Customer) -> None:
    response = customer.post_order(offering="h100-serve", price_plan="on_demand", ports=[9000])

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["image"], body["command"], body["ports"]) == (
        DEFAULTS["image"],
        DEFAULTS["command"],
        [9000],
    )
    workload = Workload.objects.get(pk=body["workload_id"])
    assert (workload.image, workload.ports) == (DEFAULTS["image"], [9000])


@pytest.mark.parametrize(
    ("kind", "defaults", "field"),
    [
        pytest.param("instance", {"image": "Not An Image"}, "image", id="image"),
        pytest.param("instance", {"command": ["a\0b"]}, "command", id="nul-in-argv"),
        pytest.param("instance", {"env": {"NEOCLOUD_X": "v"}}, "env", id="reserved-variable"),
        pytest.param("instance", {"working_dir": "srv"}, "working_dir", id="relative-dir"),
        pytest.param("training", {"ports": [8000]}, "ports", id="ports-of-a-job"),
        pytest.param("reserved", {"image": "busybox"}, "image", id="reserved-runs-nothing"),
    ],
)
def test_defaults_beyond_a_workloads_bounds_are_refused(
    kind: str, defaults: dict[str, Any], field: str
) -> None:
    shop_builders.gpu_model("h100")
    reserved = {"max_gpus": 8, "max_duration_s": 3600} if kind == "reserved" else {}

    with pytest.raises(ApplicationError) as refused:
        run(
            services.offering_define,
            slug="bad",
            name="Bad",
            kind=kind,
            gpu_models=["h100"],
            **reserved,
            **defaults,
        )

    assert refused.value.code == "offering_invalid"
    assert field in refused.value.fields
    assert not Event.objects.filter(stream_type="offering", stream_id="bad").exists()


def test_a_catalog_file_gives_defaults(tmp_path: Path) -> None:
    shop_builders.gpu_model("h100")
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "offerings:\n"
        "  - {slug: served, name: Served, kind: instance, gpu_models: [h100],\n"
        "     image: 'busybox:1.36', command: [sh, -c, 'echo hi'], env: {A: b}, ports: [80]}\n"
    )

    call_command("load_catalog", str(catalog), verbosity=0)
    call_command("load_catalog", str(catalog), verbosity=0)

    offering = Offering.objects.get(slug="served")
    assert (offering.image, offering.command, offering.env, offering.ports) == (
        "busybox:1.36",
        ["sh", "-c", "echo hi"],
        {"A": "b"},
        [80],
    )
    assert offering.version == 1  # loading it again records nothing
