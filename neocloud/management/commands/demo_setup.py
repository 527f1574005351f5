"""``manage.py demo_setup``: the demo's data on the embedded default.

An operator for the admin; a customer organization with a project and an API key; the fleet
of ``examples/fleet.yaml``, provisioned through the simulated driver (in-process tasks), and the
node of ``examples/demo-agent.yaml``, which a real node agent runs (``manage.py demo`` starts
it and provisions the node once it reports in) with a fresh token in ``var/``.
Idempotent, and refused outside the demo (``NEOCLOUD_DEMO=1``, only on the embedded default) so
no deployment gets these logins.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from billing import services as billing_services
from billing.models import DefaultGpuPrice
from catalog.templates import web_templates_define
from inventory import fleet_import
from inventory import services as inventory_services
from inventory.lifecycle import NodeState
from inventory.models import Node
from neocloud.core.transactions import atomic_with_retry
from tenants import services
from tenants.access import Actor
from tenants.models import Organization, Scope, User

OPERATOR = ("admin@neocloud.local", "admin")
CUSTOMER = ("demo@neocloud.local", "demo")
KEY_FILE = "demo-api-key.txt"
AGENT_TOKEN_FILE = "demo-agent-token"  # noqa: S105 (a file name)
AGENT_NODE = ("fra1", "agent-01")  # cluster, node of AGENT_FLEET
AGENT_GPU_MODEL = "l4-24gb"

# On-demand USD cents per GPU-hour for work submitted without an offering, about what public
# clouds ask: the what-if quotes them, and the demo's usage can be invoiced.
PRICES = {"h100-sxm5-80gb": 249, "a100-sxm4-80gb": 129, "l40s-48gb": 89, "l4-24gb": 45}

FLEET = settings.BASE_DIR / "examples" / "fleet.yaml"
AGENT_FLEET = settings.BASE_DIR / "examples" / "demo-agent.yaml"


class Command(BaseCommand):
    help = "Create the demo's data (embedded default only)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEMO:
            raise CommandError("demo_setup runs only in the demo (NEOCLOUD_DEMO=1, `make demo`)")
        actor = Actor.system_actor("demo_setup")
        if not User.objects.filter(email=OPERATOR[0]).exists():
            User.objects.create_superuser(*OPERATOR)
        key_file = settings.VAR_DIR / KEY_FILE
        if not Organization.objects.filter(slug="demo-lab").exists():
            customer = User.objects.filter(email=CUSTOMER[0]).first() or atomic_with_retry(
                services.user_register,
                actor=actor,
                email=CUSTOMER[0],
                password=CUSTOMER[1],
                full_name="Demo Customer",
            )
            organization = atomic_with_retry(
                services.organization_create,
                actor=actor,
                name="Demo Lab",
                slug="demo-lab",
                owner=customer,
            )
            atomic_with_retry(
                services.project_create,
                actor=actor,
                organization=organization,
                name="Research",
                slug="research",
            )
            _, secret = atomic_with_retry(
                services.api_key_create,
                actor=actor,
                organization=organization,
                user=customer,
                name="demo key",
                scopes=list(Scope),
            )
            key_file.write_text(secret + "\n")
        self._fleet(actor)
        self._prices(actor)
        self._web_templates(actor)
        self.stdout.write(f"operator (admin):  {OPERATOR[0]} / {OPERATOR[1]}")
        self.stdout.write(f"customer:          {CUSTOMER[0]} / {CUSTOMER[1]}")
        if key_file.exists():
            self.stdout.write(f"customer API key:  {key_file.read_text().strip()}")
            self.stdout.write(
                "  try: curl -H 'Authorization: Bearer <key>' http://127.0.0.1:8000/api/v1/projects"
            )

    def _fleet(self, actor: Actor) -> None:
        """Import the example fleet and provision whatever is not ready yet."""
        for path in (FLEET, AGENT_FLEET):
            fleet_import.fleet_import(
                actor=actor, fleet=fleet_import.fleet_parse_yaml(path.read_text()), dry_run=False
            )
        for node in Node.objects.filter(state=NodeState.REGISTERED).exclude(driver="agent"):
            atomic_with_retry(inventory_services.node_provision, actor=actor, node=node)
        _, token = atomic_with_retry(
            inventory_services.node_token_rotate, actor=actor, node=agent_node_of_demo()
        )
        token_file = settings.VAR_DIR / AGENT_TOKEN_FILE
        token_file.touch(mode=0o600)
        token_file.chmod(0o600)  # the agent refuses a token others can read
        token_file.write_text(token + "\n")
        ready = Node.objects.filter(state=NodeState.READY).count()
        self.stdout.write(f"fleet:             {ready} of {Node.objects.count()} nodes ready")

    def _web_templates(self, actor: Actor) -> None:
        """Jupyter Lab and a plain HTTP service on the agent node's GPUs (issue 32)."""
        node = agent_node_of_demo()
        model = node.gpu_model.slug if node.gpu_model else "l4-24gb"
        atomic_with_retry(
            web_templates_define,
            actor=actor,
            gpu_model=model,
            region=node.cluster.region.slug,
            price_per_gpu_hour_minor=PRICES.get(model, 100),
            currency="USD",
        )

    def _prices(self, actor: Actor) -> None:
        """The demo's default prices, where none is set (an operator's own stays)."""
        priced = set(
            DefaultGpuPrice.objects.filter(price_plan="on_demand").values_list(
                "gpu_model", flat=True
            )
        )
        for model, cents in PRICES.items():
            if model not in priced:
                atomic_with_retry(
                    billing_services.default_price_set,
                    actor=actor,
                    gpu_model=model,
                    price_per_gpu_hour_minor=cents,
                    currency="USD",
                )


def agent_node_of_demo() -> Node:
    cluster, name = AGENT_NODE
    return Node.objects.get(cluster__slug=cluster, name=name)
