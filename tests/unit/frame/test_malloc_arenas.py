"""The operator caps glibc's malloc arenas before its threads start, unless the environment decides, and
hands free pages back."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import threading; from slipway.heap import limit_malloc_arenas; print(limit_malloc_arenas()); "
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


def test_free_pages_are_handed_back_after_a_burst() -> None:
    """A burst of allocations freed again (as the listings parsed at start): trimming returns the memory."""
    probe = (
        "import os\n"
        "from slipway import heap\n"
        "def rss(): return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) * 1024\n"
        "burst = [bytearray(4096) for _ in range(50_000)]\n"  # about 200 MiB in malloc's heap
        "keep = burst[::500]\n"  # a few survivors spread over it, as cached objects among a listing
        "del burst\n"
        "before = rss(); trimmed = heap.trim(); after = rss()\n"
        "print(trimmed, before - after)\n"
    )
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "operator")
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": root},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    trimmed, returned = done.stdout.split()
    assert trimmed == "True" and int(returned) > 100 * 2**20  # most of the 200 MiB freed between survivors
