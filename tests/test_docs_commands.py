"""The shell blocks of the getting-started and install pages, run as written, so that the pages
cannot drift from the code.

Each ```sh block of these pages follows a marker: ``<!-- test: run -->`` (run here) or
``<!-- test: skip: REASON -->`` (it cannot run here: apt, systemctl, a server that serves until
stopped). A page says where its blocks run: ``<!-- test: embedded -->`` against the demo
(``manage.py demo``, what ``make demo`` runs), ``<!-- test: postgres -->`` on a scratch
database of the test's PostgreSQL with deploy/neocloud.env.example's environment (its
generated values generated, Stripe where nothing answers). A page's run blocks go to one
``bash -euo pipefail`` in a directory holding the checkout (its files linked) and ``.venv``
(this interpreter's); "127.0.0.1:8000" becomes the address of a free port. A comment
``# "TEXT"`` in a run block is output the run must print.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.deploy import ROOT, production_environment
from tests.live import free_port
from tests.paths import searchable

PAGES = [
    *sorted((ROOT / "docs" / "getting-started").glob("*.md")),
    ROOT / "docs" / "operations" / "install.md",
]
DOCUMENTED_ADDRESS = "127.0.0.1:8000"
RUN_TIMEOUT_S = 240
_BLOCK = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!-- test: (run|skip: \S[^>]*?) -->\s*$")
_BACKEND = re.compile(r"^<!-- test: (embedded|postgres) -->$", re.MULTILINE)
_EXPECTED = re.compile(r'#\s*"([^"]+)"')


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    marker: str  # "run", "skip: <reason>", or "" (unmarked)
    code: str


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        found.append(
            Block(
                page=page.relative_to(ROOT).as_posix(),
                line=text.count("\n", 0, match.start()) + 1,
                marker=marker[1] if marker else "",
                code=match[1],
            )
        )
    return found


def backend(page: Path) -> str:
    said = _BACKEND.findall(page.read_text())
    return said[0] if len(said) == 1 else ""


def pages_with_commands() -> list[Path]:
    return [page for page in PAGES if any(b.marker == "run" for b in blocks(page))]


def test_every_shell_block_says_whether_it_runs_here() -> None:
    unmarked = [f"{b.page}:{b.line}" for page in PAGES for b in blocks(page) if not b.marker]

    assert unmarked == []
    assert {page.name for page in pages_with_commands()} == {"demo.md", "install.md"}
    for page in pages_with_commands():
        assert backend(page), f"{page.name} says neither embedded nor postgres"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The checkout as the pages' reader has it: its files, and ``.venv`` with the project."""
    work = tmp_path / "checkout"
    work.mkdir()
    searchable(work)  # the demo's agent runs (users of their own) work below it
    for entry in ROOT.iterdir():
        if entry.name not in {".venv", "var", ".git"}:
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(Path(sys.prefix))
    (work / "var").mkdir()
    return work


def _base_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {name: os.environ[name] for name in keep if name in os.environ}


def _wait_for(url: str, process: subprocess.Popen[bytes], log: Path, ready: Path) -> None:
    deadline = time.monotonic() + 120
    while not (ready.exists() and _answers(url)):
        if process.poll() is not None:
            pytest.fail(f"the server exited:\n{log.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            pytest.fail(f"the server did not answer in time:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)


def _answers(url: str) -> bool:
    result = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "--max-time", "2", url], check=False, timeout=10
    )
    return result.returncode == 0


@pytest.fixture
def scratch_database() -> Iterator[str]:
    """An empty database on the test's PostgreSQL server, dropped afterwards."""
    configured = os.environ.get("DATABASE_URL", "")
    if not configured.startswith(("postgres://", "postgresql://")):
        pytest.skip("the install page runs on PostgreSQL: DATABASE_URL is not set")
    if not os.environ.get("REDIS_URL"):
        pytest.skip("the install page runs its worker and beat on Redis: REDIS_URL is not set")
    parts = urlsplit(configured)
    name = f"{parts.path.lstrip('/') or 'neocloud'}_docs_{uuid.uuid4().hex[:8]}"
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run_page(page: Path, work: Path, env: dict[str, str], address: str) -> str:
    """The page's run blocks as one script; its processes (and theirs) stopped afterwards."""
    script = "\n".join(b.code for b in blocks(page) if b.marker == "run")
    script = script.replace(DOCUMENTED_ADDRESS, address)
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        # What the script started in the background (the install page's processes).
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        time.sleep(1)
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    for expected in _EXPECTED.findall(script):
        assert expected in text, f"{expected!r} not in the output:\n{text}"
    return text


def test_the_demo_tour_runs_against_the_demo(workdir: Path) -> None:
    path = ROOT / "docs" / "getting-started" / "demo.md"
    assert backend(path) == "embedded"
    port = free_port()
    env = {**_base_env(), "NEOCLOUD_DEMO": "1", "NEOCLOUD_VAR_DIR": str(workdir / "var")}
    log = workdir / "var" / "demo.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(workdir / ".venv" / "bin" / "python"), "manage.py", "demo", f"127.0.0.1:{port}"],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for(
            f"http://127.0.0.1:{port}/healthz", server, log, workdir / "var" / "demo-api-key.txt"
        )
        _run_page(path, workdir, _base_env(), f"127.0.0.1:{port}")
    finally:
        with suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGINT)  # as Ctrl-C: the demo stops its agent
        try:
            server.wait(20)
        finally:
            with suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


def test_the_install_page_runs_on_postgresql(workdir: Path, scratch_database: str) -> None:
    path = ROOT / "docs" / "operations" / "install.md"
    assert backend(path) == "postgres"
    env = {
        **_base_env(),
        **production_environment(),
        "DATABASE_URL": scratch_database,
        "REDIS_URL": os.environ["REDIS_URL"],
        "STRIPE_API_BASE": "http://127.0.0.1:9",  # nothing answers: nothing is charged
    }

    _run_page(path, workdir, env, f"127.0.0.1:{free_port()}")
