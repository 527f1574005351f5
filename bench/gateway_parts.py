"""The real parts the gateway's bench and tests start: a Caddy whose admin API and server
listen on loopback, and ``bench/webapp.py`` (HTTP and a websocket echo)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

WEBAPP = Path(__file__).with_name("webapp.py")
SYSTEM_PYTHON = "/usr/bin/python3"  # what a run's uid may execute


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def caddy_binary() -> str | None:
    return shutil.which("caddy")


@contextmanager
def caddy_started() -> Iterator[str]:
    """A Caddy with an empty config and its admin API on a loopback port; its admin URL."""
    binary = caddy_binary()
    if binary is None:
        raise RuntimeError("caddy is not installed (apt-get install caddy)")
    admin = f"127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory() as home:
        config = Path(home) / "caddy.json"
        config.write_text(json.dumps({"admin": {"listen": admin}}))
        process = subprocess.Popen(  # noqa: S603 - a fixed command line
            [binary, "run", "--config", str(config)],
            env={"HOME": home, "XDG_DATA_HOME": home, "XDG_CONFIG_HOME": home},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait(f"http://{admin}/config/")
            yield f"http://{admin}"
        finally:
            process.terminate()
            process.wait(timeout=10)


@contextmanager
def webapp_started(name: str, port: int | None = None) -> Iterator[int]:
    """The web app on a loopback port, started here (not by an agent); its port."""
    port = port or free_port()
    python = SYSTEM_PYTHON if Path(SYSTEM_PYTHON).exists() else sys.executable
    process = subprocess.Popen(  # noqa: S603 - a fixed command line
        [python, str(WEBAPP), str(port), name], stdout=subprocess.DEVNULL
    )
    try:
        _wait(f"http://127.0.0.1:{port}/")
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait(url: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - loopback
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
