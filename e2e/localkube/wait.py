"""Wait for a condition with a deadline (the only place that polls)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Call ``check`` until it returns something truthy; return that, or raise ``TimeoutError``.

    Exceptions from ``check`` count as "not yet"; the last one is quoted in the error.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    last_value: T | None = None
    while True:
        try:
            last_value = check()
            if last_value:
                return last_value
        except Exception as e:  # the thing we wait for may not exist yet
            last_error = e
        if time.monotonic() >= deadline:
            detail = f": last error {last_error!r}" if last_error else f": last value {last_value!r}"
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)  # short poll interval inside a deadline


async def until(check: Callable[[], object], timeout: float = 5.0, what: str = "", interval: float = 0.001) -> None:
    """Yield to the event loop until ``check()`` is truthy; raise ``TimeoutError`` after ``timeout``
    seconds (the asynchronous :func:`wait_for`, for code that runs on the loop the test drives)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what or check}")
        await asyncio.sleep(interval)


def wait_answers(url: str, alive: Callable[[], bool], log: object, timeout: float, what: str) -> None:
    """Wait until ``url`` answers 200 (a health or readiness endpoint of a process started here);
    fail at once, naming its ``log``, if the process exits first (``alive`` false)."""
    import httpx

    def answers() -> bool:
        if not alive():
            raise RuntimeError(f"{what} exited while starting; see {log}")
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answers, timeout, f"{what} to answer {url}")
