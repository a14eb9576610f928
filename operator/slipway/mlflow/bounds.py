"""What an MLflow server (or a trainer writing to it) can make Slipway do, bounded, and the words
for each bound: the HTTP layer (:mod:`.http`) applies them."""

from __future__ import annotations

import httpx


def write_timeout(seconds: float, configured: float) -> httpx.Timeout:
    """A timeout whose four phases (pool, connect, write, read) add up to at most ``seconds``
    (and each to at most ``configured``): a write ends inside its lease, however each phase goes."""
    budget = max(0.001, min(seconds, configured))
    short = budget / 8
    return httpx.Timeout(connect=short, write=short, pool=short, read=budget - 3 * short)


def too_large_hint(url: str) -> str:
    """What to do about an answer over the limit, by what was asked."""
    if "/runs/" in url:
        return (
            " (a run with tens of thousands of metric keys, params or tags: log a metric under one key "
            "with its step, mlflow.log_metric('loss', value, step=step), not a new key per step)"
        )
    return ""


def paging_loop(what: str, page: int) -> str:
    return (
        f"MLflow {what} answered page {page} with a page token it had answered before: Slipway stops "
        "reading a server that pages in a circle; check the server at MLFLOW_TRACKING_URI and any proxy "
        "in front of it"
    )


def too_many_pages(what: str, pages: int) -> str:
    return (
        f"MLflow {what} answered more than {pages} pages: Slipway reads no more; check the server at "
        "MLFLOW_TRACKING_URI, or delete what the search finds in excess"
    )
