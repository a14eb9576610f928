"""The operator caps glibc's malloc arenas before its threads start, unless the environment decides."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import threading; from slipway.__main__ import limit_malloc_arenas; print(limit_malloc_arenas()); "
    "import ctypes; print(ctypes.CDLL(None).gnu_get_libc_version() != 0)"
)


def _run(env: dict[str, str]) -> list[str]:
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "operator")
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**env, "PYTHONPATH": root}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_arenas_are_capped_on_glibc() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert _run(env) == ["True", "True"]  # this machine's Python runs on glibc, and mallopt took the cap


def test_malloc_arena_max_in_the_environment_wins() -> None:
    assert _run({**os.environ, "MALLOC_ARENA_MAX": "4"})[0] == "False"
