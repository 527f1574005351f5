"""One version, pyproject's, reported by the API root, ``/healthz`` and the node agent."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from django.test import Client

import agent
import neocloud
from agent.config import parse

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
VERSION = tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def test_the_control_plane_and_the_agent_have_pyprojects_version() -> None:
    assert (neocloud.__version__, agent.VERSION) == (VERSION, VERSION)


@pytest.mark.django_db
def test_the_api_root_reports_the_version(client: Client) -> None:
    root = client.get("/api/v1/").json()

    assert (root["version"], root["server_version"]) == ("v1", VERSION)


def test_healthz_reports_the_version(client: Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "version": VERSION}


def test_the_agent_prints_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(["--version"], {})

    assert exited.value.code == 0
    assert capsys.readouterr().out == f"neocloud-agent {VERSION}\n"
