"""The deployment files a user looks for (deploy/*.service, Containerfile, compose.yaml), checked
statically: images cannot be built here, so what can be checked is: the units verify, every
process runs the same command in its unit, the image and compose, and what the image installs
is the whole project."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.deploy import CONTROL_PLANE_UNITS, ENV_FILE, ROOT, unit, unit_command

VENV_BIN = Path(sys.executable).parent
INSTALL_DIR = "/opt/neocloud"
# compose.yaml's service for each unit.
SERVICES = {name: name.removeprefix("neocloud-") for name in CONTROL_PLANE_UNITS}


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(VENV_BIN))
    if not found:
        pytest.skip(f"{name} is not installed")
    return found


def compose() -> dict:  # type: ignore[type-arg]
    loaded: dict = yaml.safe_load((ROOT / "compose.yaml").read_text())  # type: ignore[type-arg]
    return loaded


def containerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Containerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


@pytest.mark.parametrize("name", CONTROL_PLANE_UNITS)
def test_each_unit_verifies_with_its_command_installed(name: str, tmp_path: Path) -> None:
    # The unit as it would be installed, with this checkout and its venv in place of
    # /opt/neocloud: systemd-analyze fails on a command that is not there.
    analyze = tool("systemd-analyze")
    text = (ROOT / "deploy" / f"{name}.service").read_text()
    text = text.replace(f"{INSTALL_DIR}/.venv/bin", str(VENV_BIN)).replace(INSTALL_DIR, str(ROOT))
    text = text.replace("/etc/neocloud/neocloud.env", str(ENV_FILE))
    (tmp_path / f"{name}.service").write_text(text)

    result = subprocess.run(
        [analyze, "verify", "--man=no", f"{name}.service"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("name", CONTROL_PLANE_UNITS)
def test_each_unit_runs_unprivileged_and_confined(name: str) -> None:
    service = unit(name)["Service"]

    assert service["User"] == "neocloud"
    assert service["EnvironmentFile"] == "/etc/neocloud/neocloud.env"
    assert service["WorkingDirectory"] == INSTALL_DIR
    assert service["CapabilityBoundingSet"] == ""
    assert service["UMask"] == "0077"
    for option in ("NoNewPrivileges", "PrivateTmp", "PrivateDevices", "ProtectHome"):
        assert service[option] == "yes", option
    assert service["ProtectSystem"] == "strict"


def test_the_units_commands_are_the_documented_processes() -> None:
    page = (ROOT / "docs" / "operations" / "processes.md").read_text()

    for name in CONTROL_PLANE_UNITS:
        command = " ".join(unit_command(name)).replace(f"{INSTALL_DIR}/", "")
        assert command in page, name


def test_compose_passes_yamllint() -> None:
    yamllint = tool("yamllint")

    result = subprocess.run(
        [yamllint, "--strict", "compose.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_runs_the_whole_control_plane_with_the_units_commands() -> None:
    services = compose()["services"]

    assert set(services) == {"db", "redis", "migrate", *SERVICES.values()}
    for name, service in SERVICES.items():
        assert services[service]["command"] == unit_command(name), service
        assert services[service]["build"]["dockerfile"] == "Containerfile"
        env_files = [entry["path"] for entry in services[service]["env_file"]]
        assert env_files[0] == ENV_FILE.relative_to(ROOT).as_posix()
        assert services[service]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"}
        }
    assert services["migrate"]["command"] == [
        f"{INSTALL_DIR}/.venv/bin/python",
        "manage.py",
        "migrate",
    ]


def test_compose_points_the_env_file_at_its_own_database_and_redis() -> None:
    env = {
        line.split("=", 1)[0]: line.split("=", 1)[1]
        for line in ENV_FILE.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    db = compose()["services"]["db"]["environment"]

    assert env["DATABASE_URL"] == (
        f"postgres://{db['POSTGRES_USER']}:{db['POSTGRES_PASSWORD']}@db:5432/{db['POSTGRES_DB']}"
    )
    assert env["REDIS_URL"].startswith("redis://redis:6379/")


def test_the_containerfile_passes_hadolint() -> None:
    hadolint = tool("hadolint")

    result = subprocess.run(
        [hadolint, "Containerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_copies_what_exists_and_every_package_it_installs() -> None:
    copied = [args.split() for op, args in containerfile_instructions() if op == "COPY"]
    sources = [source for *sources, _ in copied for source in sources]
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]

    for source in sources:
        assert (ROOT / source).exists(), source
    assert {"pyproject.toml", "README.md", "manage.py", "deploy/gunicorn.conf.py"} <= set(sources)
    assert {pattern.rstrip("*") + "/" for pattern in packages} <= set(sources)


def test_the_image_runs_the_web_unit_as_a_user_that_is_not_root() -> None:
    instructions = containerfile_instructions()
    cmd = [args for op, args in instructions if op == "CMD"]
    user = [args for op, args in instructions if op == "USER"]
    workdir = [args for op, args in instructions if op == "WORKDIR"]

    assert yaml.safe_load(cmd[-1]) == unit_command("neocloud-web")
    assert user[-1].split(":")[0] not in {"0", "root"}
    assert workdir[-1] == INSTALL_DIR


def _glob_matches(path: str, pattern: str) -> bool:
    """setuptools' glob: ``*`` stays within one directory."""
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(map(fnmatch.fnmatchcase, parts, wanted))


def test_pip_install_dot_installs_every_data_file_of_the_packages() -> None:
    # The image is `pip install .`, not a checkout: a template missing from package-data is a
    # page that fails in production only.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_data = setuptools["package-data"]
    packages = [pattern.rstrip("*") for pattern in setuptools["packages"]["find"]["include"]]
    tracked = subprocess.run(  # what a clone has, not a developer's caches
        ["git", "ls-files", "-z", *packages],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\0")
    missing = []
    for name in filter(None, tracked):
        relative = Path(name)
        if (
            relative.suffix in {".py", ".pyi"}
            or relative.name == "ruff.toml"  # the linter's, not the program's
            or "tests" in relative.parts
        ):
            continue
        owner = relative.parent
        while owner.as_posix().replace("/", ".") not in package_data and owner.parent.parts:
            owner = owner.parent
        patterns = package_data.get(owner.as_posix().replace("/", "."), [])
        inside = relative.relative_to(owner).as_posix()
        if not any(_glob_matches(inside, pattern) for pattern in patterns):
            missing.append(name)

    assert missing == []
