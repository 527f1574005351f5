"""The engine is a pure library: only the standard library and itself (DESIGN.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "scheduler" / "engine"
ALLOWED_ROOTS = set(sys.stdlib_module_names) | {"scheduler"}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_engine_imports_only_the_standard_library() -> None:
    offenders = {
        path.name: sorted(_imported_roots(path) - ALLOWED_ROOTS)
        for path in ENGINE.glob("*.py")
        if _imported_roots(path) - ALLOWED_ROOTS
    }
    assert offenders == {}


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
