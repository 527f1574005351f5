"""The import rules (``[tool.importlinter]`` in pyproject.toml) hold for the tree, and each
fails when an import it forbids is added: a copy of the packages gets one planted import, and
import-linter checks that contract alone on the copy."""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from importlinter import api
from importlinter.application import use_cases

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "pyproject.toml"
CONFIGURATION = api.read_configuration(str(ROOT / CONFIG))
PACKAGES: list[str] = CONFIGURATION["session_options"]["root_packages"]

# What each case plants: (contract, module that gets the import, the import it forbids).
PLANTED = {
    "kernel-imports-log": ("packages", "neocloud.core", "from events.errors import StreamConflict"),
    "api-imports-tenants": ("packages", "neocloud.api.idempotency", "from tenants import actor"),
    "log-imports-app": ("log", "events.store", "import tenants.models"),
    "engine-imports-django": ("engine", "scheduler.engine", "import django.db"),
    "engine-imports-scheduler": ("engine", "scheduler.engine", "from scheduler import models"),
    "services-import-tasks": ("apps", "orders.services", "from orders import tasks"),
    "models-import-selectors": ("apps", "catalog.models", "from catalog import selectors"),
    "hooks-import-services": ("scheduler", "scheduler.hooks", "from scheduler import services"),
    "drivers-import-services": ("inventory", "inventory.drivers", "from inventory import services"),
    "types-import-store": ("events", "events.types", "from events import store"),
    "money-imports-sla": ("acyclic", "billing.money", "from billing import sla"),
    "agent-imports-django": ("agent", "agent.client", "import django.db"),
    "agent-imports-inventory": ("agent", "agent.loops", "from inventory import services"),
}


def lint(tree: Path, contract: str | None = None) -> bool:
    """Whether import-linter finds ``contract`` (None: every contract) kept in ``tree``.

    The packages are imported already (Django is set up): import-linter finds them through
    ``importlib``, which would answer with those, so they are hidden while it looks."""
    with mock.patch.dict(sys.modules), mock.patch.object(sys, "path", [str(tree), *sys.path]):
        for name in [m for m in sys.modules if m.partition(".")[0] in PACKAGES]:
            del sys.modules[name]
        importlib.invalidate_caches()
        return use_cases.lint_imports(
            config_filename=str(tree / CONFIG),
            limit_to_contracts=(contract,) if contract else (),
            cache_dir=None,
            no_logo=True,
            is_debug_mode=True,  # a configuration error raises instead of reading as broken
        )


def source(tree: Path, module: str) -> Path:
    path = tree.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@contextmanager
def planted(path: Path, text: str) -> Iterator[None]:
    """``path`` with ``text`` added at its end (or new), and as it was again afterwards."""
    before = path.read_text() if path.exists() else None
    path.write_text(f"{before or ''}\n{text}\n")
    try:
        yield
    finally:
        if before is None:
            path.unlink()
        else:
            path.write_text(before)


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages' Python files and the configuration, in a scratch directory."""
    tree = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package,
            tree / package,
            ignore=lambda folder, names: (
                [n for n in names if not n.endswith(".py") and not Path(folder, n).is_dir()]
                + ["__pycache__"]
            ),
        )
    shutil.copy(ROOT / CONFIG, tree / CONFIG)
    return tree


def test_the_tree_keeps_every_contract() -> None:
    assert lint(ROOT)


def test_the_copy_keeps_every_contract(copy: Path) -> None:
    assert lint(copy)  # so a broken contract below is broken by its planted import


def test_every_contract_has_a_planted_import() -> None:
    contracts = {options["id"] for options in CONFIGURATION["contracts_options"]}
    assert contracts == {contract for contract, _, _ in PLANTED.values()}


@pytest.mark.parametrize(("contract", "module", "line"), PLANTED.values(), ids=PLANTED)
def test_a_forbidden_import_breaks_its_contract(
    copy: Path, contract: str, module: str, line: str
) -> None:
    with planted(source(copy, module), line):
        assert not lint(copy, contract)


def test_the_log_names_every_module_in_its_layers(copy: Path) -> None:
    with planted(copy / "events" / "outbox.py", '"""A module the layers do not place."""'):
        assert not lint(copy, "events")
