"""``manage.py import_fleet``: the example fleet, idempotence, refused files, the Alibaba trace."""

from __future__ import annotations

import copy
import csv
import os
from collections import Counter
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from events import store
from inventory import fleet_import
from inventory.fleet_import import FleetInvalid
from inventory.models import Cluster, Gpu, GpuModel, Node, Rack, Region
from tenants import secrets
from tenants.access import Actor
from tenants.errors import PermissionDenied
from tests.builders import Builder

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fleet.yaml"
# The traces sit beside the repository (../shared); NEOCLOUD_TRACES_DIR points elsewhere.
TRACES = Path(os.environ.get("NEOCLOUD_TRACES_DIR", ROOT.parent / "shared/traces"))
ALIBABA_GPU_NODES = TRACES / "alibaba-gpu-v2023/openb_node_list_gpu_node.csv"
NODES = "regions[0].clusters[0].racks"  # the path of the example's racks


def import_fleet(*args: str) -> str:
    out = StringIO()
    call_command("import_fleet", *args, stdout=out)
    return out.getvalue()


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())  # type: ignore[no-any-return]


def write(tmp_path: Path, data: object, name: str = "fleet.yaml") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return str(path)


def rack_nodes(data: dict[str, Any], rack: int) -> list[dict[str, Any]]:
    return data["regions"][0]["clusters"][0]["racks"][rack]["nodes"]  # type: ignore[no-any-return]


def summary_row(output: str, label: str) -> list[int]:
    """The numbers (total, new, changed, unchanged) of one line of the summary."""
    line = next(line for line in output.splitlines() if line.startswith(f"{label} "))
    return [int(word) for word in line[len(label) :].split()]


def domains(node_name: str) -> list[int]:
    return list(Gpu.objects.filter(node__name=node_name).values_list("nvlink_domain", flat=True))


# --- the example ---------------------------------------------------------------------------


def test_example_imports_its_fleet_and_topology() -> None:
    output = import_fleet(str(EXAMPLE))

    assert sorted(GpuModel.objects.values_list("slug", flat=True)) == [
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "l40s-48gb",
    ]
    assert list(Region.objects.values_list("slug", "name")) == [("eu-central", "Frankfurt")]
    assert list(Cluster.objects.values_list("slug", "region_id")) == [("fra1", "eu-central")]
    assert list(Rack.objects.values_list("name", "leaf_switch", "spine")) == [
        ("r01", "leaf-r01", "spine-a"),
        ("r02", "leaf-r02", "spine-a"),
        ("r03", "leaf-r03", "spine-b"),
        ("r04", "leaf-r04", "spine-b"),
    ]
    by_rack = {
        rack.name: sorted(rack.nodes.values_list("name", flat=True)) for rack in Rack.objects.all()
    }
    assert by_rack == {
        "r01": [f"h100-{n:02d}" for n in range(1, 9)],
        "r02": ["l40s-01", "l40s-02", "l40s-03", "l40s-04"],
        "r03": ["a100-01", "a100-02", "a100-03", "a100-04"],
        "r04": ["a100-05", "a100-06", "a100-07", "a100-08"],
    }
    assert Node.objects.count() == 20
    assert Gpu.objects.count() == 112
    assert dict(Counter(Gpu.objects.values_list("node__gpu_model", flat=True))) == {
        "h100-sxm5-80gb": 64,
        "l40s-48gb": 16,
        "a100-sxm4-80gb": 32,
    }
    # NVSwitch board: one domain of 8; PCIe cards: a domain each; A100 4-GPU: one of 4.
    assert domains("h100-05") == [0] * 8
    assert domains("l40s-03") == [0, 1, 2, 3]
    assert domains("a100-07") == [0] * 4
    h100 = Node.objects.get(name="h100-01")
    assert (h100.cpu_milli, h100.memory_mib, h100.state) == (112000, 2097152, "registered")
    assert summary_row(output, "GPU models") == [3, 3, 0, 0]
    assert summary_row(output, "racks") == [4, 4, 0, 0]
    assert summary_row(output, "nodes") == [20, 20, 0, 0]
    assert summary_row(output, "GPUs") == [112, 112, 0, 0]
    assert "rotate a node's token" in output


def test_no_node_token_is_printed() -> None:
    output = import_fleet(str(EXAMPLE))

    hashes = set(Node.objects.values_list("token_hash", flat=True))
    assert len(hashes) == 20
    assert not any(secrets.digest(word) in hashes for word in output.split())


def test_reimport_appends_no_event() -> None:
    import_fleet(str(EXAMPLE))
    head = store.head_position()

    output = import_fleet(str(EXAMPLE))

    assert store.head_position() == head
    assert "(0 events)" in output
    assert summary_row(output, "nodes") == [20, 0, 0, 20]
    assert summary_row(output, "GPUs") == [112, 0, 0, 112]


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu_milli", 96000), ("memory_mib", 1048576)],
    ids=["cpu", "memory"],
)
def test_a_changed_node_records_exactly_one_change(tmp_path: Path, field: str, value: int) -> None:
    import_fleet(str(EXAMPLE))
    head = store.head_position()
    data = example()
    rack_nodes(data, 1)[1][field] = value  # l40s-02

    output = import_fleet(write(tmp_path, data))

    recorded = store.read_all(after=head)
    node = Node.objects.get(name="l40s-02")
    assert [(e.type, e.stream_id) for e in recorded] == [
        ("inventory.NodeRespecified", str(node.pk))
    ]
    assert getattr(node, field) == value
    assert summary_row(output, "nodes") == [20, 0, 1, 19]


def test_moving_a_node_to_another_rack_records_one_change(tmp_path: Path) -> None:
    import_fleet(str(EXAMPLE))
    head = store.head_position()
    data = example()
    rack_nodes(data, 2).append(rack_nodes(data, 1).pop())  # l40s-04 into r03

    import_fleet(write(tmp_path, data))

    assert [e.type for e in store.read_all(after=head)] == ["inventory.NodeRespecified"]
    assert Node.objects.get(name="l40s-04").rack == Rack.objects.get(name="r03")


def test_a_changed_gpu_model_definition_records_one_change(tmp_path: Path) -> None:
    import_fleet(str(EXAMPLE))
    head = store.head_position()
    data = example()
    data["gpu_models"][1]["shareable"] = False

    output = import_fleet(write(tmp_path, data))

    assert [e.type for e in store.read_all(after=head)] == ["inventory.GpuModelDefined"]
    assert GpuModel.objects.get(slug="l40s-48gb").shareable is False
    assert summary_row(output, "GPU models") == [3, 0, 1, 2]


def test_changing_a_registered_nodes_gpus_is_refused(tmp_path: Path) -> None:
    import_fleet(str(EXAMPLE))
    head = store.head_position()
    data = example()
    rack_nodes(data, 1)[0]["gpus"] = 2  # l40s-01 has 4
    rack_nodes(data, 1)[0]["cpu_milli"] = 1000  # would be recorded, were the file accepted

    with pytest.raises(CommandError) as raised:
        import_fleet(write(tmp_path, data))

    assert (
        f"{NODES}[1].nodes[0]: node 'l40s-01' is registered with 4 GPUs of l40s-48gb in 4"
        " NVLink domain(s), the file says 2 GPUs of l40s-48gb in 2 NVLink domain(s)"
    ) in str(raised.value)
    assert store.head_position() == head
    assert Node.objects.get(name="l40s-01").cpu_milli == 64000


def test_dry_run_reports_and_writes_nothing() -> None:
    output = import_fleet(str(EXAMPLE), "--dry-run")

    assert summary_row(output, "nodes") == [20, 20, 0, 0]
    assert "nothing was written" in output
    assert store.head_position() == 0
    assert Node.objects.count() == 0


def test_a_node_may_name_a_model_defined_before(tmp_path: Path) -> None:
    import_fleet(str(EXAMPLE))
    fleet = {
        "regions": [
            {
                "slug": "us-east",
                "clusters": [
                    {
                        "slug": "iad1",
                        "nodes": [  # in no rack
                            {
                                "name": "spare-h100",
                                "gpu_model": "h100-sxm5-80gb",
                                "gpus": 8,
                                "cpu_milli": 112000,
                                "memory_mib": 2097152,
                            },
                            {"name": "login-01", "cpu_milli": 32000, "memory_mib": 131072},
                        ],
                    }
                ],
            }
        ]
    }

    import_fleet(write(tmp_path, fleet))

    spare = Node.objects.get(name="spare-h100")
    assert (spare.cluster.slug, spare.rack, spare.gpu_model_id) == ("iad1", None, "h100-sxm5-80gb")
    assert domains("spare-h100") == [0] * 8  # nvswitch: one domain by default
    login = Node.objects.get(name="login-01")
    assert (login.gpu_model, login.gpus.count()) == (None, 0)


def test_only_operators_import(build: Builder) -> None:
    fleet = fleet_import.fleet_parse_yaml(EXAMPLE.read_text())
    customer = Actor(user=build.user())
    head = store.head_position()

    with pytest.raises(PermissionDenied):
        fleet_import.fleet_import(actor=customer, fleet=fleet)

    assert store.head_position() == head
    assert GpuModel.objects.count() == 0


# --- refused files ---------------------------------------------------------------------------


def _set(path: list[Any], value: object) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


RACKS: list[Any] = ["regions", 0, "clusters", 0, "racks"]

BAD_FILES = [
    pytest.param(
        _set([*RACKS, 1, "nodes", 2, "gpu_model"], "h200"),
        f"{NODES}[1].nodes[2].gpu_model: unknown model 'h200'",
        id="unknown-model",
    ),
    pytest.param(
        _delete([*RACKS, 2, "nodes", 0, "cpu_milli"]),
        f"{NODES}[2].nodes[0].cpu_milli: required field missing",
        id="missing-field",
    ),
    pytest.param(
        _delete(["gpu_models", 1, "vendor"]),
        "gpu_models[1].vendor: required field missing",
        id="missing-model-field",
    ),
    pytest.param(
        _set([*RACKS, 0, "nodes", 0, "count"], -1),
        f"{NODES}[0].nodes[0].count: must be at least 1, got -1",
        id="negative-count",
    ),
    pytest.param(
        _set([*RACKS, 1, "nodes", 2, "name"], "l40s-01"),
        f"{NODES}[1].nodes[2].name: duplicate node 'l40s-01' (also at {NODES}[1].nodes[0].name)",
        id="duplicate-node",
    ),
    pytest.param(
        _set([*RACKS, 3, "nodes", 0, "start"], 4),
        f"{NODES}[3].nodes[0].name: duplicate node 'a100-04' (also at {NODES}[2].nodes[0].name)",
        id="overlapping-patterns",
    ),
    pytest.param(
        _set([*RACKS, 3, "name"], "r01"),
        f"{NODES}[3].name: duplicate rack 'r01' (also at {NODES}[0].name)",
        id="duplicate-rack",
    ),
    pytest.param(
        _set(["gpu_models", 0, "interconnect"], "infiniband"),
        "gpu_models[0].interconnect: unknown interconnect 'infiniband' (one of nvswitch,"
        " nvlink, pcie)",
        id="bad-interconnect",
    ),
    pytest.param(
        _set([*RACKS, 0, "nodes", 0, "nvlink_domains"], 3),
        f"{NODES}[0].nodes[0].nvlink_domains: 3 domains do not split 8 GPUs evenly",
        id="uneven-domains",
    ),
    pytest.param(
        _set([*RACKS, 0, "nodes", 0, "nvlink_domains"], [4, 2]),
        f"{NODES}[0].nodes[0].nvlink_domains: domain sizes [4, 2] add up to 6, not 8",
        id="domain-sizes",
    ),
    pytest.param(
        _set([*RACKS, 0, "nodes", 0, "name"], "h100"),
        f"{NODES}[0].nodes[0].name: with count, the name is a pattern with {{n}}: got 'h100'",
        id="count-without-pattern",
    ),
    pytest.param(
        _set([*RACKS, 0, "nodes", 0, "name"], "h100-{n.__class__}"),
        f"{NODES}[0].nodes[0].name: with count, the name is a pattern with {{n}}",
        id="pattern-lookup",
    ),
    pytest.param(
        _set([*RACKS, 1, "nodes", 0, "cpu_mili"], 1000),
        f"{NODES}[1].nodes[0].cpu_mili: unknown field",
        id="typo",
    ),
    pytest.param(
        _set([*RACKS, 1, "nodes", 0, "gpus"], "four"),
        f"{NODES}[1].nodes[0].gpus: expected a whole number, got str 'four'",
        id="not-a-number",
    ),
    pytest.param(
        _delete([*RACKS, 1, "nodes", 0, "gpu_model"]),
        f"{NODES}[1].nodes[0].gpu_model: required field missing (the node has GPUs)",
        id="gpus-without-model",
    ),
    pytest.param(
        _set(["gpu_models", 0, "shareable"], "no"),
        "gpu_models[0].shareable: expected true or false, got str 'no'",
        id="not-a-boolean",
    ),
    pytest.param(
        _set(["regions", 0, "slug"], "eu central"),
        "regions[0].slug: 'eu central' is not a slug",
        id="bad-slug",
    ),
]


@pytest.mark.parametrize(("mutate", "message"), BAD_FILES)
def test_a_bad_file_is_refused_and_writes_nothing(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    data = copy.deepcopy(example())
    mutate(data)

    with pytest.raises(CommandError) as raised:
        import_fleet(write(tmp_path, data))

    assert str(raised.value).startswith("fleet_invalid: ")
    assert message in str(raised.value)
    assert store.head_position() == 0
    assert GpuModel.objects.count() == Region.objects.count() == Node.objects.count() == 0


def test_every_problem_is_reported_at_once() -> None:
    data = example()
    del rack_nodes(data, 1)[0]["cpu_milli"]
    rack_nodes(data, 0)[0]["count"] = 0
    data["gpu_models"][2]["interconnect"] = "ethernet"

    with pytest.raises(FleetInvalid) as raised:
        fleet_import.fleet_parse(data)

    assert set(raised.value.fields) == {
        f"{NODES}[1].nodes[0].cpu_milli",
        f"{NODES}[0].nodes[0].count",
        "gpu_models[2].interconnect",
    }
    assert raised.value.message.startswith("3 problems in the fleet file, nothing imported:")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "(file): the file is empty"),
        ("regions: [\n", "line 2, column 1: not valid YAML"),
        ("- a\n- b\n", "(file): expected a mapping, got a list"),
        ("regions: {slug: x}\n", "regions: expected a list, got a mapping"),
    ],
    ids=["empty", "syntax", "not-a-mapping", "not-a-list"],
)
def test_a_file_that_is_no_fleet_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CommandError) as raised:
        import_fleet(write(tmp_path, text))

    assert message in str(raised.value)
    assert store.head_position() == 0


def test_the_command_wants_one_source() -> None:
    with pytest.raises(CommandError, match=r"either FILE\.yaml or --alibaba-nodes"):
        import_fleet()
    with pytest.raises(CommandError, match="cannot read"):
        import_fleet("/nonexistent/fleet.yaml")


# --- the Alibaba trace -----------------------------------------------------------------------

SMALL_CSV = """sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,64000,262144,2,P100
openb-node-0001,96000,393216,8,G2
openb-node-0002,0000096000,786432,8,V100M32
openb-node-0003,96000,393216,8,G2
openb-node-0004,32000,131072,0,
openb-node-0005,96000,393216,8,G2
openb-node-0006,8000,32768,1,V100M16
"""


def test_a_small_alibaba_file_imports_with_racks_per_model(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL_CSV, "nodes.csv")

    output = import_fleet("--alibaba-nodes", path, "--rack-size", "2")

    cluster = Cluster.objects.get()
    assert (cluster.slug, cluster.name, cluster.region_id) == (
        "openb",
        "Alibaba openb trace",
        "alibaba",
    )
    assert sorted(GpuModel.objects.values_list("slug", flat=True)) == [
        "g2",
        "p100",
        "v100m16",
        "v100m32",
    ]
    assert all(GpuModel.objects.values_list("shareable", flat=True))
    racks = {
        rack.name: sorted(rack.nodes.values_list("name", flat=True)) for rack in Rack.objects.all()
    }
    assert racks == {
        "rack-p100-01": ["openb-node-0000"],
        "rack-g2-01": ["openb-node-0001", "openb-node-0003"],
        "rack-g2-02": ["openb-node-0005"],
        "rack-v100m32-01": ["openb-node-0002"],
        "rack-cpu-01": ["openb-node-0004"],
        "rack-v100m16-01": ["openb-node-0006"],
    }
    assert domains("openb-node-0000") == [0, 1]  # PCIe: a domain per GPU
    assert domains("openb-node-0001") == list(range(8))  # G2: assumed PCIe
    assert domains("openb-node-0002") == [0] * 8  # NVLink: one domain per node
    assert domains("openb-node-0006") == [0]
    cpu_only = Node.objects.get(name="openb-node-0004")
    assert (cpu_only.gpu_model, cpu_only.gpus.count()) == (None, 0)
    assert Node.objects.get(name="openb-node-0002").cpu_milli == 96000
    assert summary_row(output, "nodes") == [7, 7, 0, 0]
    assert summary_row(output, "GPUs") == [35, 35, 0, 0]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("openb-node-0009,96000,393216,8,H800", "line 9.model: unknown model 'H800'"),
        ("openb-node-0009,96000,393216,8,", "line 9.model: required for a node with GPUs"),
        ("openb-node-0009,96000,393216,0,T4", "line 9.model: 'T4' given for a node without GPUs"),
        ("openb-node-0009,-1,393216,1,T4", "line 9.cpu_milli: expected a whole number >= 1"),
        ("openb-node-0000,96000,393216,1,T4", "line 9.sn: duplicate node 'openb-node-0000'"),
    ],
    ids=["unknown-model", "no-model", "model-without-gpus", "negative-cpu", "duplicate"],
)
def test_a_bad_alibaba_row_is_refused(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, SMALL_CSV + line + "\n", "nodes.csv")

    with pytest.raises(CommandError) as raised:
        import_fleet("--alibaba-nodes", path)

    assert message in str(raised.value)
    assert store.head_position() == 0


def test_an_alibaba_file_without_its_columns_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "sn,cpu\nx,1\n", "nodes.csv")

    with pytest.raises(CommandError, match="line 1: missing columns cpu_milli, memory_mib, gpu,"):
        import_fleet("--alibaba-nodes", path)


@pytest.mark.skipif(not ALIBABA_GPU_NODES.exists(), reason="the Alibaba trace is not here")
def test_the_alibaba_gpu_nodes_import_and_again_without_events() -> None:
    with ALIBABA_GPU_NODES.open(newline="") as file:
        rows = list(csv.DictReader(file))
    gpus_by_model = Counter[str]()
    for row in rows:
        gpus_by_model[row["model"].lower()] += int(row["gpu"])

    import_fleet("--alibaba-nodes", str(ALIBABA_GPU_NODES))
    head = store.head_position()
    output = import_fleet("--alibaba-nodes", str(ALIBABA_GPU_NODES))

    assert Node.objects.count() == len(rows) == 1213
    assert Gpu.objects.count() == sum(gpus_by_model.values()) == 6212
    assert Counter(Gpu.objects.values_list("node__gpu_model", flat=True)) == gpus_by_model
    assert store.head_position() == head
    assert summary_row(output, "nodes") == [1213, 0, 0, 1213]
    for rack in Rack.objects.all():
        models = set(rack.nodes.values_list("gpu_model", flat=True))
        assert len(models) == 1, rack.name
        assert 1 <= rack.nodes.count() <= fleet_import.ALIBABA_RACK_SIZE
    # NVLink models: one domain per node; PCIe ones: a domain per GPU.
    for node in Node.objects.filter(gpu_model__in=["v100m16", "v100m32"]).prefetch_related("gpus"):
        assert {gpu.nvlink_domain for gpu in node.gpus.all()} == {0}
    for node in Node.objects.filter(gpu_model__in=["t4", "p100"]).prefetch_related("gpus"):
        assert [gpu.nvlink_domain for gpu in node.gpus.all()] == list(range(node.gpus.count()))
