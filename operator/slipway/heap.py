"""The operator's process heap on glibc: fewer malloc arenas, and free memory handed back.

A Python operator that caches thousands of objects keeps, besides them, what its busy moments
allocated and freed: the listings parsed at start (every object of every watched kind at once),
the first passes of every object. glibc keeps that freed memory in its arenas, one per thread that
allocated while another held a lock (up to eight per core), and returns little of it unasked.
:func:`limit_malloc_arenas` caps the arenas before any thread starts; :func:`start_trimming` asks
glibc every minute to return its free pages (``malloc_trim``). Elsewhere (musl, macOS) both do nothing.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

# glibc's M_ARENA_MAX (mallopt) and the arenas the operator allows itself.
M_ARENA_MAX = -8
MALLOC_ARENAS = 2
TRIM_SECONDS = 60.0


def _libc() -> Any | None:
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both must exist (glibc)
    except (OSError, AttributeError):
        return None
    return libc


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``count``, unless ``MALLOC_ARENA_MAX`` sets them. Called before
    any thread starts. True when set (False on another C library, or when the environment decides)."""
    libc = _libc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, count))


def trim() -> bool:
    """Hand glibc's free pages back to the system now; True when some were."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def start_trimming(period: float = TRIM_SECONDS) -> threading.Thread | None:
    """A daemon thread that trims every ``period`` seconds (a few milliseconds each); None off glibc."""
    if _libc() is None:
        return None
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(period):
            trim()

    thread = threading.Thread(target=loop, name="slipway-heap-trim", daemon=True)
    thread.start()
    return thread
