"""Builders of fleet, catalog and ordering state, through the services (every row a
projection of events), for the catalog and orders tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from catalog import services as catalog
from catalog.models import Offering, PricePlan
from inventory import services as inventory
from inventory.lifecycle import NodeState
from inventory.models import Cluster, GpuModel, Node, Region
from orders import services as orders
from orders.models import Order
from tenants.models import Organization, Project, Role
from tests.builders import SYSTEM, Builder, client_with_key, run
from tests.builders.fleet import put_in_state

REGION = "eu-west"


@dataclass
class Shop:
    """A fleet in one region and a catalog selling it: two ready 8xH100 nodes (and one
    cordoned), one ready 4xL4 node (shareable), and an offering of each kind."""

    region: Region
    cluster: Cluster
    nodes: list[Node]


def region(slug: str = REGION) -> Region:
    return run(inventory.region_define, slug=slug, name=slug.upper())  # type: ignore[no-any-return]


def gpu_model(slug: str = "h100", *, shareable: bool = False) -> GpuModel:
    return run(  # type: ignore[no-any-return]
        inventory.gpu_model_define,
        slug=slug,
        name=slug.upper(),
        vendor="NVIDIA",
        memory_gib=80,
        interconnect="nvswitch",
        shareable=shareable,
    )


def node(
    cluster: Cluster, name: str, model: GpuModel, gpus: int = 8, state: NodeState | None = None
) -> Node:
    """A registered node, put in ``state`` (ready by default) as a test set-up event."""
    registered, _ = run(
        inventory.node_register,
        cluster=cluster,
        name=name,
        gpu_model=model,
        cpu_milli=96_000,
        memory_mib=1_048_576,
        gpus=[inventory.GpuSlot(index=i) for i in range(gpus)],
    )
    return put_in_state(registered, state or NodeState.READY)


def offering(slug: str, kind: str, gpu_models: Sequence[str] = ("h100",), **shape: Any) -> Offering:
    return run(  # type: ignore[no-any-return]
        catalog.offering_define,
        slug=slug,
        name=slug,
        kind=kind,
        gpu_models=list(gpu_models),
        **shape,
    )


def price(
    of: Offering,
    plan: str = "on_demand",
    minor: int = 250,
    currency: str = "USD",
    in_region: str = REGION,
) -> PricePlan:
    return run(  # type: ignore[no-any-return]
        catalog.price_plan_set,
        offering=of,
        region=in_region,
        plan=plan,
        price_per_gpu_hour_minor=minor,
        currency=currency,
    )


def shop() -> Shop:
    where = region()
    cluster = run(inventory.cluster_define, region=where, slug="eu-west-1", name="EU West 1")
    h100, l4 = gpu_model("h100"), gpu_model("l4", shareable=True)
    nodes = [
        node(cluster, "h100-a", h100),
        node(cluster, "h100-b", h100),
        node(cluster, "h100-c", h100, state=NodeState.CORDONED),
        node(cluster, "l4-a", l4, gpus=4),
    ]
    for slug, gpus in (("1xh100", 1), ("8xh100", 8)):
        instance = offering(slug, "instance", gpus_per_node=gpus)
        price(instance, "on_demand", 250)
        price(instance, "preemptible", 100)
    training = offering(
        "h100-training", "training", gpus_per_node=8, max_nodes=16, max_runtime_s=7 * 86_400
    )
    price(training, "on_demand", 240)
    inference = offering("l4-half", "inference", ("l4",), gpu_milli=500)
    price(inference, "on_demand", 80)
    reserved = offering("h100-reserved", "reserved", max_gpus=16, max_duration_s=30 * 86_400)
    price(reserved, "reserved", 180)
    return Shop(region=where, cluster=cluster, nodes=nodes)


@dataclass
class Customer:
    """An organization with a project and a key per role, and an API client helper."""

    organization: Organization
    project: Project
    keys: dict[str, str]

    def post_order(self, role: str = Role.OWNER, key: str | None = None, **body: Any) -> Any:
        headers: dict[str, Any] = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        payload = {"project": str(self.project.pk), "region": REGION, **body}
        return client_with_key(self.keys[role]).post(
            "/api/v1/orders", payload, format="json", **headers
        )

    def post_order_action(
        self, order_id: str, action: str, role: str = Role.OWNER, **body: Any
    ) -> Any:
        return client_with_key(self.keys[role]).post(
            f"/api/v1/orders/{order_id}/{action}", body, format="json"
        )

    def get(self, path: str, role: str = Role.OWNER) -> Any:
        return client_with_key(self.keys[role]).get(path)

    def client(self, role: str = Role.OWNER) -> Any:
        return client_with_key(self.keys[role])


def customer(build: Builder, name: str = "Acme") -> Customer:
    owner = build.user()
    organization = build.organization(name, owner=owner)
    project = build.project(organization)
    keys = {Role.OWNER.value: build.key(organization, owner)[1]}
    for role in (Role.ADMIN, Role.MEMBER, Role.VIEWER, Role.BILLING):
        keys[role.value] = build.key(organization, build.member(organization, role).user)[1]
    return Customer(organization=organization, project=project, keys=keys)


def order(
    project: Project,
    offering_slug: str,
    plan: str = "on_demand",
    quantity: int = 1,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    **request: Any,
) -> Order:
    """An order submitted through the service by the system actor (an operator)."""
    return run(  # type: ignore[no-any-return]
        orders.order_submit,
        actor=SYSTEM,
        project=project,
        offering=offering_slug,
        region=REGION,
        price_plan=plan,
        request=orders.OrderRequest(
            quantity=quantity, starts_at=starts_at, ends_at=ends_at, **request
        ),
    )
