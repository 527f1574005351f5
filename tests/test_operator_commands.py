"""The operators' commands, on PostgreSQL with real commits, and the install runbook
(docs/operations/install.md) through them: from an empty database to a first invoice."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from billing.models import DefaultGpuPrice, Invoice
from catalog.models import Offering, PricePlan
from events.models import Event
from inventory import events as inventory_events
from inventory.lifecycle import NodeState
from inventory.models import Node
from scheduler import tasks
from scheduler.models import Workload
from tenants.models import ApiKey, Organization, Project, Scope, User
from tests.builders import client_with_key
from tests.builders.history import catch_up
from tests.inventory.conftest import eager_tasks  # noqa: F401 - a fixture
from tests.scheduler.conftest import in_process  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parent.parent
FLEET = str(ROOT / "examples" / "fleet.yaml")
CATALOG = str(ROOT / "examples" / "catalog.yaml")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def command(*args: str) -> dict[str, str]:
    """Run a command; its output lines as {first word: the rest}."""
    out = io.StringIO()
    call_command(*args, stdout=out)
    lines = [line.split(maxsplit=1) for line in out.getvalue().splitlines() if line.strip()]
    return {words[0]: words[1] if len(words) > 1 else "" for words in lines}


# --- create_operator ----------------------------------------------------------------------------


def test_create_operator_prints_a_staff_key_that_acts_as_an_operator() -> None:
    printed = command("create_operator", "ops@neocloud.example")
    staff = client_with_key(printed["API"].split()[-1])

    me = staff.get("/api/v1/me").json()
    created = staff.post(
        "/api/v1/organizations",
        {"name": "Initech", "owner_email": "peter@initech.example"},
        format="json",
    )

    assert me["email"] == "ops@neocloud.example"
    assert sorted(me["api_key"]["scopes"]) == sorted(Scope)
    assert created.status_code == 201
    assert User.objects.get(email="ops@neocloud.example").is_staff
    assert Organization.objects.get(slug="operators").name == "operators"


def test_create_operator_again_makes_another_key_in_the_same_organization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEOCLOUD_OPERATOR_PASSWORD", "s3cret-pw")
    first = command("create_operator", "ops@neocloud.example")["API"].split()[-1]
    second = command("create_operator", "ops@neocloud.example")["API"].split()[-1]

    assert first != second
    assert ApiKey.objects.filter(user__email="ops@neocloud.example").count() == 2
    assert Organization.objects.filter(slug="operators").count() == 1
    assert User.objects.get(email="ops@neocloud.example").check_password("s3cret-pw")


def test_create_operator_refuses_an_organization_they_do_not_own() -> None:
    command("create_operator", "ops@neocloud.example")
    before = Event.objects.count()

    with pytest.raises(CommandError, match="not its owner"):
        command("create_operator", "other@neocloud.example")

    assert Event.objects.count() == before
    assert not User.objects.filter(email="other@neocloud.example").exists()


# --- create_organization ------------------------------------------------------------------------


def test_create_organization_makes_a_default_project_the_key_can_submit_to() -> None:
    printed = command("create_organization", "Initech", "--owner", "peter@initech.example")
    owner = client_with_key(printed["API"].split()[-1])

    projects = owner.get("/api/v1/projects").json()["results"]

    assert [(p["slug"], p["name"]) for p in projects] == [("default", "default")]
    assert printed["project"].startswith("default (")


def test_create_organization_names_its_first_project() -> None:
    command("create_organization", "Initech", "--owner", "peter@initech.example", "--project", "ml")

    assert list(Project.objects.values_list("slug", flat=True)) == ["ml"]


def test_create_organization_with_a_bad_project_slug_writes_nothing() -> None:
    with pytest.raises(CommandError, match="a slug"):
        command(
            "create_organization", "Initech", "--owner", "p@initech.example", "--project", "M L"
        )

    assert not Organization.objects.exists()


# --- set_default_prices -------------------------------------------------------------------------


def test_set_default_prices_sets_each_model_and_replaces_on_a_second_run() -> None:
    call_command("import_fleet", FLEET, stdout=io.StringIO())

    command("set_default_prices", "h100-sxm5-80gb=250", "a100-sxm4-80gb=180")
    command("set_default_prices", "h100-sxm5-80gb=260", "--plan", "preemptible")
    command("set_default_prices", "h100-sxm5-80gb=240")

    assert sorted(
        DefaultGpuPrice.objects.values_list(
            "gpu_model", "price_plan", "price_per_gpu_hour_minor", "currency"
        )
    ) == [
        ("a100-sxm4-80gb", "on_demand", 180, "USD"),
        ("h100-sxm5-80gb", "on_demand", 240, "USD"),
        ("h100-sxm5-80gb", "preemptible", 260, "USD"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["h100-sxm5-80gb=250", "h200=300"], "unknown GPU model 'h200'"),
        (["h100-sxm5-80gb=250", "--currency", "usd"], "ISO 4217"),
        (["h100-sxm5-80gb=2.50"], "expected MODEL=MINOR"),
    ],
)
def test_set_default_prices_sets_all_or_none(args: list[str], message: str) -> None:
    call_command("import_fleet", FLEET, stdout=io.StringIO())

    with pytest.raises(CommandError, match=message):
        command("set_default_prices", *args)

    assert not DefaultGpuPrice.objects.exists()


# --- load_catalog -------------------------------------------------------------------------------


def test_load_catalog_defines_the_starter_offerings_once() -> None:
    call_command("import_fleet", FLEET, stdout=io.StringIO())

    printed = command("load_catalog", CATALOG)
    events = Event.objects.count()
    command("load_catalog", CATALOG)

    assert printed == {"6": "offerings, 8 price plans"}  # with issue 32's dev offering
    assert Event.objects.count() == events
    assert sorted(Offering.objects.values_list("slug", "kind")) == [
        ("1xh100", "instance"),
        ("8xh100", "instance"),
        ("a100-training", "training"),
        ("h100-dev", "dev"),
        ("h100-reserved", "reserved"),
        ("l40s-inference", "inference"),
    ]
    assert (
        PricePlan.objects.get(
            offering__slug="1xh100", region="eu-central", plan="on_demand"
        ).price_per_gpu_hour_minor
        == 250
    )


def test_a_catalog_with_a_bad_entry_loads_nothing_and_names_the_place(tmp_path: Path) -> None:
    call_command("import_fleet", FLEET, stdout=io.StringIO())
    bad = tmp_path / "catalog.yaml"
    bad.write_text(
        Path(CATALOG).read_text().replace("plan: reserved, price_per", "plan: on_demand, price_per")
    )

    with pytest.raises(CommandError, match=r"offerings\[4\]\.price_plans\[0\]: .*plan"):
        command("load_catalog", str(bad))

    assert not Offering.objects.exists()


# --- provision_fleet ----------------------------------------------------------------------------


@pytest.mark.usefixtures("eager_tasks")
def test_provision_fleet_brings_every_imported_node_to_ready_through_the_steps(
    settings: pytest.FixtureRequest,
) -> None:
    settings.SIMULATED_STEP_DELAY_S = 0  # type: ignore[attr-defined]
    call_command("import_fleet", FLEET, stdout=io.StringIO())

    printed = command("provision_fleet", "--wait", "60")

    assert printed == {"provisioning": "20 nodes", "20": "of 20 nodes ready"}
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.READY}
    succeeded = Event.objects.filter(type=inventory_events.ProvisioningStepSucceeded.event_type)
    assert succeeded.values("stream_id").distinct().count() == 20
    assert command("provision_fleet") == {"provisioning": "0 nodes"}


# --- the runbook --------------------------------------------------------------------------------


@pytest.mark.usefixtures("in_process")
def test_the_runbook_takes_an_empty_database_to_a_first_invoice(
    settings: pytest.FixtureRequest,
) -> None:
    settings.SIMULATED_STEP_DELAY_S = 0  # type: ignore[attr-defined]
    operator_key = command("create_operator", "ops@neocloud.example")["API"].split()[-1]
    call_command("import_fleet", FLEET, stdout=io.StringIO())
    command("provision_fleet", "--wait", "60")
    # 10 cents a GPU-second: the test's second of work is worth more than a cent.
    command("set_default_prices", "h100-sxm5-80gb=36000", "a100-sxm4-80gb=180", "l40s-48gb=110")
    command("load_catalog", CATALOG)
    printed = command("create_organization", "Initech", "--owner", "peter@initech.example")
    owner = client_with_key(printed["API"].split()[-1])
    project = owner.get("/api/v1/projects").json()["results"][0]["id"]

    submitted = owner.post(
        "/api/v1/workloads",
        {
            "project": project,
            "name": "hello-gpu",
            "gpu_models": ["h100-sxm5-80gb"],
            "gpus_per_node": 4,
            "runtime_estimate_s": 0.5,
        },
        format="json",
    )
    time.sleep(0.6)
    tasks.tick()
    catch_up()
    closed = command("close_period", f"{timezone.now():%Y-%m}")

    assert submitted.status_code == 201, submitted.json()
    assert Workload.objects.get().status == "succeeded"
    invoice = Invoice.objects.get(organization__slug="initech")
    assert invoice.status == "finalized"
    assert invoice.currency == "USD"
    (line,) = invoice.lines.all()
    assert (line.kind, line.gpu_model, line.unit_price_minor) == ("usage", "h100-sxm5-80gb", 36000)
    assert invoice.total_minor == line.amount_minor > 0
    assert closed == {invoice.number: f"finalized {invoice.total_minor} USD"}
    seen = client_with_key(operator_key).get(f"/api/v1/invoices/{invoice.pk}")
    assert seen.status_code == 200


def test_create_organization_gives_the_new_owner_a_link_to_set_a_password() -> None:
    printed = command(
        "create_organization", "Initech", "--owner", "peter@initech.example",
        "--console-url", "https://cloud.example.com/",
    )  # fmt: skip
    link = printed["set-password"]
    assert link.startswith("https://cloud.example.com/password-reset/")

    browser = Client()
    form = browser.get(link.removeprefix("https://cloud.example.com"), follow=True)
    chosen = "Kettle-Orbit-5813"
    done = browser.post(
        form.redirect_chain[-1][0], {"new_password1": chosen, "new_password2": chosen}
    )

    assert done.status_code == 302
    signed_in = Client().post("/login", {"username": "peter@initech.example", "password": chosen})
    assert signed_in.status_code == 302


def test_an_owner_without_a_password_can_have_a_reset_link_mailed() -> None:
    command("create_organization", "Initech", "--owner", "peter@initech.example")

    response = Client().post("/password-reset", {"email": "peter@initech.example"})

    assert response.status_code == 302
    assert [message.to for message in mail.outbox] == [["peter@initech.example"]]
