"""The engine is a pure library: only the standard library and itself (DESIGN.md); and its
policies do not reach back into the cycle that runs them."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "scheduler" / "engine"
PACKAGE = "scheduler.engine"


def _imports(path: Path) -> Iterator[tuple[str, ...]]:
    """Each module an import of ``path`` brings in, as the names it may have: ``import a.b`` is
    ``a.b``; ``from a import b`` is ``a.b`` when ``b`` is a module, else ``a``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield (alias.name,)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield (f"{node.module}.{alias.name}", node.module)


def _allowed(name: str) -> bool:
    return (
        name.split(".")[0] in sys.stdlib_module_names
        or name == PACKAGE
        or name.startswith(f"{PACKAGE}.")
    )


def test_the_engine_imports_only_the_standard_library_and_itself() -> None:
    offenders = {
        path.name: [names[0] for names in _imports(path) if not any(map(_allowed, names))]
        for path in ENGINE.glob("*.py")
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_no_engine_module_but_the_package_imports_the_cycle() -> None:
    """The cycle imports its policies; they take narrow values, never the ``Scheduler``. Only
    the forecast, which runs the cycle forward (above it, as the simulator does), drives it."""
    cycle = f"{PACKAGE}.cycle"
    importers = sorted(
        path.name
        for path in ENGINE.glob("*.py")
        if path.name not in {"__init__.py", "cycle.py", "forecast.py"}
        and any(cycle in names for names in _imports(path))
    )
    assert importers == []


def test_the_engine_runs_without_django_installed_in_the_process() -> None:
    code = (
        "import sys; sys.modules['django'] = None\n"
        "from scheduler.engine import Node, Policy, Request, Snapshot, schedule\n"
        "n = Node('n', 'h100', (0, 0), 1000, 1000)\n"
        "d = schedule(Snapshot((n,)), [Request('j', 'q', gpus_per_node=2)], Policy(), 0.0)\n"
        "print(d.allocations[0].placements[0].gpus)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ENGINE.parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "(0, 1)"
