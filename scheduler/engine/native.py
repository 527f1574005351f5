"""Whether the engine runs compiled: the same modules built with mypyc (``scripts/build_engine.py``)
into ``build/native`` of the checkout, used only while they were built from the sources here.

The build is optional: where it is missing, stale (a source changed since), made for another
Python, or ``NEOCLOUD_ENGINE=python`` is set, the engine runs as plain Python, with the same
decisions. ``scheduler.engine.NATIVE`` says which (``bench`` prints it beside its figures).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import MutableSequence
from pathlib import Path

SOURCES = Path(__file__).resolve().parent
BUILD = SOURCES.parents[1] / "build" / "native"
STAMP = "sources.sha256"
# Plain Python always: the package's own door (it chooses) and this module.
UNCOMPILED = frozenset({"__init__.py", "native.py"})
GROUP = "neocloud_engine"  # mypyc's shared library: ``neocloud_engine__mypyc``


def compiled_sources(sources: Path = SOURCES) -> list[Path]:
    """The engine's modules that the build compiles."""
    return sorted(p for p in sources.glob("*.py") if p.name not in UNCOMPILED)


def fingerprint(sources: Path = SOURCES) -> str:
    """What a build is made from: the compiled modules' text and the Python it is for."""
    digest = hashlib.sha256(sys.implementation.cache_tag.encode())
    for path in compiled_sources(sources):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def fresh(build: Path = BUILD, sources: Path = SOURCES) -> bool:
    """Whether ``build`` holds a build of exactly these sources for this Python."""
    try:
        stamp = (build / STAMP).read_text().strip()
    except OSError:
        return False
    return stamp == fingerprint(sources)


def use(package_path: MutableSequence[str], build: Path = BUILD, sources: Path = SOURCES) -> bool:
    """Put a fresh build ahead of the sources on the engine package's path (and its shared
    library on ``sys.path``), unless the environment asks for plain Python; whether it did."""
    if os.environ.get("NEOCLOUD_ENGINE", "").lower() == "python" or not fresh(build, sources):
        return False
    package_path.insert(0, str(build / "scheduler" / "engine"))
    if str(build) not in sys.path:
        sys.path.append(str(build))
    return True
