"""The catalog: operators define offerings and prices (events, idempotent); customers list
them with prices and what the fleet could start now."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from catalog import services
from catalog.models import Offering, PricePlan
from events import store
from neocloud.core.errors import ApplicationError
from scheduler import scheduling
from scheduler.models import Allocation
from tenants.access import Actor
from tenants.models import Role, User
from tests.builders import Builder, client_with_key, run
from tests.builders import commerce as shop_builders

pytestmark = pytest.mark.django_db


def _types(slug: str) -> list[str]:
    return [e.type for e in store.read_stream("offering", slug)]


@pytest.fixture
def shop() -> shop_builders.Shop:
    return shop_builders.shop()


@pytest.fixture
def customer(build: Builder) -> shop_builders.Customer:
    return shop_builders.customer(build)


def test_defining_the_same_offering_again_records_nothing() -> None:
    shop_builders.gpu_model("h100")

    first = shop_builders.offering("8xh100", "instance", gpus_per_node=8)
    again = shop_builders.offering("8xh100", "instance", gpus_per_node=8)
    changed = shop_builders.offering("8xh100", "instance", gpus_per_node=8, description="new")

    assert first.version == again.version == 1
    assert changed.version == 2
    assert _types("8xh100") == ["catalog.OfferingDefined", "catalog.OfferingDefined"]
    assert Offering.objects.get().description == "new"


@pytest.mark.parametrize(
    ("shape", "field"),
    [
        pytest.param({"gpu_models": ["h200"]}, "gpu_models", id="unknown-model"),
        pytest.param({"gpu_milli": 500}, "gpu_milli", id="share-of-a-non-shareable-model"),
        pytest.param({"kind": "instance", "max_nodes": 2}, "max_nodes", id="instance-on-2-nodes"),
        pytest.param({"kind": "reserved"}, "max_gpus", id="reserved-without-limits"),
        pytest.param({"topology": "same_planet"}, "topology", id="unknown-topology"),
        pytest.param({"gpus_per_node": 10**6}, "gpus_per_node", id="gpus-per-node-beyond-bound"),
        pytest.param({"max_nodes": 10**6}, "max_nodes", id="max-nodes-beyond-bound"),
        pytest.param({"max_runtime_s": 10**12}, "max_runtime_s", id="runtime-beyond-bound"),
        pytest.param(
            {"kind": "reserved", "max_gpus": 8, "max_duration_s": 10**9},
            "max_duration_s",
            id="reservation-longer-than-the-horizon",
        ),
        pytest.param(
            {"kind": "reserved", "max_gpus": 10**7, "max_duration_s": 3600},
            "max_gpus",
            id="max-gpus-beyond-bound",
        ),
    ],
)
def test_an_offering_that_could_never_be_ordered_is_refused(
    shape: dict[str, object], field: str
) -> None:
    shop_builders.gpu_model("h100")
    definition: dict[str, object] = {"kind": "inference", "gpu_models": ["h100"], **shape}

    with pytest.raises(ApplicationError) as refused:
        run(services.offering_define, slug="bad", name="Bad", **definition)

    assert refused.value.code == "offering_invalid"
    assert field in refused.value.fields
    assert _types("bad") == []


def test_only_operators_change_the_catalog(build: Builder) -> None:
    shop_builders.gpu_model("h100")
    customer = Actor(user=build.user())

    with pytest.raises(ApplicationError) as refused:
        run(
            services.offering_define,
            actor=customer,
            slug="x",
            name="X",
            kind="instance",
            gpu_models=["h100"],
        )

    assert refused.value.code == "permission_denied"


@pytest.mark.parametrize(
    ("plan", "currency", "field"),
    [
        pytest.param("reserved", "USD", "plan", id="reserved-price-on-an-instance"),
        pytest.param("on_demand", "usd", "currency", id="not-iso-4217"),
        pytest.param("on_demand", "USD", "price_per_gpu_hour_minor", id="price-beyond-bound"),
    ],
)
def test_a_price_plan_the_offering_cannot_have_is_refused(
    shop: shop_builders.Shop, plan: str, currency: str, field: str
) -> None:
    instance = Offering.objects.get(slug="1xh100")
    minor = 10**12 if field == "price_per_gpu_hour_minor" else 100

    with pytest.raises(ApplicationError) as refused:
        shop_builders.price(instance, plan, minor, currency)

    assert refused.value.code == "offering_invalid"
    assert field in refused.value.fields


def test_prices_are_set_replaced_and_removed_as_events(shop: shop_builders.Shop) -> None:
    instance = Offering.objects.get(slug="1xh100")
    before = len(_types("1xh100"))

    shop_builders.price(instance, "on_demand", 250)  # unchanged: nothing recorded
    replaced = shop_builders.price(instance, "on_demand", 275, "EUR")
    run(
        services.price_plan_remove,
        price_plan=PricePlan.objects.get(plan="preemptible", offering=instance),
    )

    assert (replaced.price_per_gpu_hour_minor, replaced.currency) == (275, "EUR")
    assert _types("1xh100")[before:] == ["catalog.PricePlanSet", "catalog.PricePlanRemoved"]
    assert list(instance.price_plans.values_list("plan", flat=True)) == ["on_demand"]


def test_customers_list_offerings_with_prices_and_availability(
    shop: shop_builders.Shop, customer: shop_builders.Customer
) -> None:
    response = customer.get("/api/v1/offerings", role=Role.VIEWER)

    assert response.status_code == 200
    listed = {o["slug"]: o for o in response.json()["results"]}
    assert sorted(listed) == ["1xh100", "8xh100", "h100-reserved", "h100-training", "l4-half"]
    eight = listed["8xh100"]
    assert eight["price_plans"] == [
        {
            "id": str(services.price_plan_id("8xh100", "eu-west", "on_demand")),
            "region": "eu-west",
            "plan": "on_demand",
            "price_per_gpu_hour_minor": 250,
            "currency": "USD",
        },
        {
            "id": str(services.price_plan_id("8xh100", "eu-west", "preemptible")),
            "region": "eu-west",
            "plan": "preemptible",
            "price_per_gpu_hour_minor": 100,
            "currency": "USD",
        },
    ]
    # Two ready 8-GPU nodes; the cordoned third is not schedulable.
    assert eight["availability"] == [
        {
            "region": "eu-west",
            "free_gpus": 16,
            "gpu_models": [{"gpu_model": "h100", "free_gpus": 16}],
            "units_available": 2,
        }
    ]
    assert listed["1xh100"]["availability"][0]["units_available"] == 16
    assert listed["l4-half"]["availability"][0]["units_available"] == 8  # 4 L4 in halves
    assert listed["h100-reserved"]["availability"][0]["units_available"] == 16


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("kind=instance", ["1xh100", "8xh100"], id="kind"),
        pytest.param("gpu_model=l4", ["l4-half"], id="gpu-model"),
        pytest.param(
            "region=eu-west",
            ["1xh100", "8xh100", "h100-reserved", "h100-training", "l4-half"],
            id="region",
        ),
        pytest.param("region=us-east", [], id="region-not-sold"),
        pytest.param("kind=training&gpu_model=h100", ["h100-training"], id="combined"),
    ],
)
def test_offerings_filter_by_kind_gpu_model_and_region(
    shop: shop_builders.Shop,
    customer: shop_builders.Customer,
    query: str,
    expected: list[str],
) -> None:
    response = customer.get(f"/api/v1/offerings?{query}")

    assert [o["slug"] for o in response.json()["results"]] == expected


def test_a_retired_offering_is_hidden_from_customers_not_from_operators(
    shop: shop_builders.Shop, customer: shop_builders.Customer, build: Builder
) -> None:
    run(services.offering_retire, offering=Offering.objects.get(slug="8xh100"), reason="eol")
    operator = build.user(is_staff=True)
    operator_key = build.key(build.organization("Ops", owner=operator), operator)[1]

    listed = customer.get("/api/v1/offerings").json()["results"]
    detail = customer.get("/api/v1/offerings/8xh100")
    seen_by_operator = client_with_key(operator_key).get("/api/v1/offerings/8xh100")

    assert "8xh100" not in [o["slug"] for o in listed]
    assert detail.status_code == 404
    assert seen_by_operator.json()["active"] is False


def test_offering_detail(shop: shop_builders.Shop, customer: shop_builders.Customer) -> None:
    response = customer.get("/api/v1/offerings/h100-training")

    assert response.status_code == 200
    assert response.json()["kind"] == "training"
    assert response.json()["max_nodes"] == 16


def test_listing_needs_authentication(shop: shop_builders.Shop) -> None:
    assert client_with_key(None).get("/api/v1/offerings").status_code == 401


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))
    return client


def test_operators_define_offerings_and_prices_in_the_admin(operator: Client) -> None:
    shop_builders.region()
    shop_builders.gpu_model("h100")
    shop_builders.gpu_model("a100")

    created = operator.post(
        "/admin/catalog/offering/add/",
        {
            "slug": "4xgpu",
            "name": "4 GPUs",
            "kind": "instance",
            "gpu_models": "h100, a100",
            "gpus_per_node": "4",
            "max_nodes": "1",
            "gang": "on",
            "gpu_milli": "1000",
            "topology": "any",
        },
    )
    priced = operator.post(
        "/admin/catalog/priceplan/add/",
        {
            "offering": "4xgpu",
            "region": "eu-west",
            "plan": "on_demand",
            "price_per_gpu_hour_minor": "199",
            "currency": "EUR",
        },
    )
    operator.post("/admin/catalog/offering/", {"action": "retire", "_selected_action": ["4xgpu"]})

    assert created.status_code == priced.status_code == 302
    offering = Offering.objects.get(slug="4xgpu")
    assert offering.gpu_models == ["h100", "a100"]
    assert offering.active is False
    assert offering.price_plans.get().price_per_gpu_hour_minor == 199
    assert _types("4xgpu") == [
        "catalog.OfferingDefined",
        "catalog.PricePlanSet",
        "catalog.OfferingRetired",
    ]
    assert store.read_stream("offering", "4xgpu")[0].metadata["actor"].startswith("user:")


def test_a_refused_definition_in_the_admin_shows_its_reason(operator: Client) -> None:
    shop_builders.gpu_model("h100")

    response = operator.post(
        "/admin/catalog/offering/add/",
        {
            "slug": "half",
            "name": "Half",
            "kind": "inference",
            "gpu_models": "h100",
            "gpus_per_node": "1",
            "max_nodes": "1",
            "gpu_milli": "500",
            "topology": "any",
        },
        follow=True,
    )

    shown = [str(m) for m in response.context["messages"]]
    assert any(m.startswith("offering_invalid:") for m in shown)
    assert not Offering.objects.exists()


@pytest.mark.parametrize("page", ["offering", "priceplan"])
def test_admin_lists_search_and_filter(
    shop: shop_builders.Shop, operator: Client, page: str
) -> None:
    assert operator.get(f"/admin/catalog/{page}/?q=h100").status_code == 200
    assert operator.get(f"/admin/catalog/{page}/").status_code == 200


def test_an_operator_changes_an_offering_in_the_admin(
    shop: shop_builders.Shop, operator: Client
) -> None:
    page = operator.get("/admin/catalog/offering/h100-training/change/")

    changed = operator.post(
        "/admin/catalog/offering/h100-training/change/",
        {
            "name": "H100 training",
            "kind": "training",
            "gpu_models": "h100",
            "gpus_per_node": "8",
            "max_nodes": "32",
            "gang": "on",
            "gpu_milli": "1000",
            "topology": "same_rack",
            "max_runtime_s": "86400",
        },
    )

    assert page.status_code == 200
    assert changed.status_code == 302
    offering = Offering.objects.get(slug="h100-training")
    assert (offering.max_nodes, offering.topology, offering.version) == (32, "same_rack", 3)
    assert _types("h100-training")[-1] == "catalog.OfferingDefined"


@pytest.fixture
def scheduler_state() -> Iterator[None]:
    """The scheduler's in-memory cluster state starts and ends empty."""
    scheduling.forget()
    yield
    scheduling.forget()


@pytest.mark.usefixtures("scheduler_state")
def test_allocated_gpus_are_not_available(
    shop: shop_builders.Shop, customer: shop_builders.Customer
) -> None:
    shop_builders.order(customer.project, "8xh100")
    scheduling.cycle_run(shop.cluster.pk)

    listed = {o["slug"]: o for o in customer.get("/api/v1/offerings").json()["results"]}

    assert Allocation.objects.filter(released_at__isnull=True).count() == 1
    assert listed["8xh100"]["availability"][0]["free_gpus"] == 8
    assert listed["8xh100"]["availability"][0]["units_available"] == 1
    assert listed["l4-half"]["availability"][0]["free_gpus"] == 4
