"""A benchmark run as a user runs it, ``python -m benchmarks.NAME ARGS``, from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment by default) with the repository on PYTHONPATH, so
    that ``benchmarks`` imports from any working directory."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run(name: str, *args, env: dict[str, str] | None = None, **kwargs
        ) -> subprocess.CompletedProcess:
    """``python -m benchmarks.NAME ARGS`` in a process of its own, its output captured as text
    (``kwargs`` go to subprocess.run: cwd, timeout, check)."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *map(str, args)],
                          env=bench_env(env), **kwargs)
