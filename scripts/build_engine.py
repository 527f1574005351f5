"""Compile the scheduling engine with mypyc into build/native (see scheduler/engine/native.py).

Usage: ``.venv/bin/python scripts/build_engine.py`` from anywhere; exit status 1 when the build
fails (the engine then runs as plain Python: nothing else depends on the build). The new build
is made beside the old one and takes its place whole, with its stamp, only once it is complete.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    os.environ["NEOCLOUD_ENGINE"] = "python"  # load no old build while making the new one
    from scheduler.engine import native

    try:
        from mypyc.build import mypycify
        from setuptools import Distribution
    except ImportError as missing:
        print(f"build_engine: {missing.name} is not installed (pip install -e '.[dev]')")
        return 1
    started = time.monotonic()
    work = native.BUILD.with_name("native-work")
    shutil.rmtree(work, ignore_errors=True)
    sources = [str(p.relative_to(ROOT)) for p in native.compiled_sources()]
    stamp = native.fingerprint()  # of the sources as they are when compiled
    try:
        extensions = mypycify(
            [*sources, f"--cache-dir={work / 'mypy-cache'}"],
            group_name=native.GROUP,
            target_dir=str(work / "c"),
        )
        build = Distribution({"name": "neocloud-engine", "ext_modules": extensions})
        command = build.get_command_obj("build_ext")
        command.build_lib = str(work / "lib")
        command.build_temp = str(work / "temp")
        command.parallel = os.cpu_count() or 1
        command.ensure_finalized()
        command.run()
    except (SystemExit, Exception) as failure:  # the compiler's own errors end as SystemExit
        print(f"build_engine: the build failed ({failure}); the engine runs as plain Python")
        shutil.rmtree(work, ignore_errors=True)
        return 1
    (work / "lib" / native.STAMP).write_text(stamp + "\n")
    old = native.BUILD.with_name("native-old")
    shutil.rmtree(old, ignore_errors=True)
    if native.BUILD.exists():
        native.BUILD.rename(old)
    (work / "lib").rename(native.BUILD)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    print(
        f"build_engine: {len(sources)} modules compiled into {native.BUILD.relative_to(ROOT)} "
        f"in {time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
