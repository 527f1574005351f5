"""The shipped deployment files as tests read them: ``deploy/neocloud.env.example`` (the
documented production environment) and the systemd units' commands."""

from __future__ import annotations

import base64
import configparser
import os
import re
import secrets
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_FILE = ROOT / "deploy" / "neocloud.env.example"
# The control plane's units, one per production process (docs/operations/processes.md).
CONTROL_PLANE_UNITS = ("neocloud-web", "neocloud-worker", "neocloud-beat", "neocloud-consumers")
# What the file leaves empty because each install must generate its own.
GENERATED = {
    "SECRET_KEY": lambda: secrets.token_urlsafe(50),
    "SECRETS_KEYS": lambda: base64.urlsafe_b64encode(os.urandom(32)).decode(),
    "METRICS_TOKEN": lambda: secrets.token_urlsafe(32),
}
_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")


def env_file_variables(path: Path = ENV_FILE) -> dict[str, str]:
    """The file's ``KEY=value`` lines as written (comments and blank lines skipped)."""
    variables = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        assert match, f"{path.name}: not KEY=value: {line!r}"
        variables[match[1]] = match[2]
    return variables


def production_environment() -> dict[str, str]:
    """The documented production environment, with a throwaway value for each one that must
    be generated (and only those)."""
    variables = env_file_variables()
    return {
        name: GENERATED[name]() if name in GENERATED and not value else value
        for name, value in variables.items()
    }


def unit(name: str) -> configparser.ConfigParser:
    """A systemd unit of deploy/ (``name`` without ``.service``)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read_string((ROOT / "deploy" / f"{name}.service").read_text())
    return parser


def unit_command(name: str) -> list[str]:
    """A unit's ``ExecStart`` as argv."""
    return shlex.split(unit(name)["Service"]["ExecStart"])
