"""Digesting a source within a budget per pass: a slow artifact store of 10,000 small files (a fake
speaking MLflow's artifact proxy API, each request costing 50 ms of a simulated clock: 500 s in
all, past the liveness limit of 300 s) is digested over many passes, none longer than its budget
and one request; nothing is read twice, the digest is the one of every file, and the bounds hold:
the bytes read of a file stop at its listed size, and files and directories are counted against
the operator's maximum."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import httpx
import pytest

from slipway.artifact import state as states
from slipway.mlflow import MlflowClient, MlflowUnavailable
from slipway.mlflow.digests import tree_digest
from slipway.mlflow.sources import Digesting, SourceChanged, TooManyFiles

PROXY = "/api/2.0/mlflow-artifacts/artifacts"
ROOT = "1/abc/artifacts/model"
URI = f"mlflow-artifacts:/{ROOT}"
REQUEST_SECONDS = 0.05  # the slow store: every request, a listing or a file, costs this long
LIVENESS_SECONDS = 300.0  # the operator's default stuck_pass_seconds
BUDGET_SECONDS = 10.0  # slipway.artifact.observe.DIGEST_PASS_SECONDS


class SlowStore:
    """MLflow's artifact proxy over an in-memory tree ({path: bytes}), on a clock it advances."""

    def __init__(self, files: dict[str, bytes], listed_size: Callable[[str, int], int] = lambda _, n: n) -> None:
        self.files, self.listed_size = files, listed_size
        self.now = 0.0
        self.lists: list[str] = []
        self.reads: list[str] = []
        self.requests, self.down = 0, set[int]()  # the requests (by number) answered 503
        self.client = MlflowClient("http://mlflow:5000", transport=httpx.MockTransport(self.answer))

    def clock(self) -> float:
        return self.now

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.now += REQUEST_SECONDS
        self.requests += 1
        if self.requests in self.down:
            return httpx.Response(503, json={"error_code": "TEMPORARILY_UNAVAILABLE", "message": "down"})
        path = request.url.path
        if path == PROXY:
            return self.listing(request.url.params["path"])
        relative = path.removeprefix(PROXY + "/").removeprefix(ROOT + "/")
        self.reads.append(relative)
        return httpx.Response(200, content=self.files[relative])

    def listing(self, where: str) -> httpx.Response:
        self.lists.append(where)
        prefix = where.removeprefix(ROOT).strip("/")
        entries: dict[str, dict[str, object]] = {}
        for path, content in self.files.items():
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1 :] if prefix else path
            name, _, deeper = rest.partition("/")
            full = f"{prefix}/{name}" if prefix else name
            if deeper:
                entries[name] = {"path": full, "is_dir": True}
            else:
                entries[name] = {"path": full, "is_dir": False, "file_size": self.listed_size(path, len(content))}
        return httpx.Response(200, json={"files": list(entries.values())})


def small_files(count: int, per_dir: int = 1000) -> dict[str, bytes]:
    return {f"shard-{i // per_dir:02d}/part-{i:05d}.bin": f"weights {i}\n".encode() for i in range(count)}


def oracle(files: dict[str, bytes]) -> str:
    return tree_digest((path, hashlib.sha256(content).hexdigest()) for path, content in files.items())


def test_ten_thousand_files_on_a_slow_store_are_digested_a_budget_at_a_time():
    files = small_files(10_000)
    store = SlowStore(files)
    work = Digesting(URI)
    passes, longest, messages = 0, 0.0, []
    tree = None
    while tree is None:
        passes += 1
        started = store.now
        tree = store.client.digest_within(work, BUDGET_SECONDS, 10_000, clock=store.clock)
        longest = max(longest, store.now - started)
        messages.append(work.progress())
        assert passes < 1000, "the digest converges"
    total = store.now
    assert total > LIVENESS_SECONDS  # in one pass, this store would have failed liveness
    assert longest <= BUDGET_SECONDS + REQUEST_SECONDS  # every pass: its budget and one request
    assert passes >= total // (BUDGET_SECONDS + REQUEST_SECONDS)
    assert (tree.files, tree.size_bytes, tree.digest) == (len(files), sum(map(len, files.values())), oracle(files))
    assert sorted(store.reads) == sorted(files)  # every file read once, none twice
    assert len(store.lists) == 1 + 10  # the root and its ten directories, each listed once
    assert messages[0].startswith("digesting ") and "/10,000 files" in messages[0]
    assert any(m.startswith("digesting 3,") for m in messages)  # the count goes up pass by pass
    print(f"\n10,000 files, {REQUEST_SECONDS * 1000:.0f} ms a request: {total:.0f} s of digest in {passes} passes, "
          f"the longest {longest:.2f} s (liveness {LIVENESS_SECONDS:.0f} s)")  # fmt: skip


def test_an_mlflow_outage_mid_digest_loses_no_progress_and_skips_nothing():
    files = small_files(400, per_dir=100)
    store = SlowStore(files)
    store.down = {3, 150}  # a directory listing and a file read answered 503
    work = Digesting(URI)
    tree, outages = None, 0
    while tree is None:
        try:
            tree = store.client.digest_within(work, 5.0, 10_000, clock=store.clock)
        except MlflowUnavailable:
            outages += 1  # the pass fails; the next one carries on from the same progress
    assert outages == 2 and tree.digest == oracle(files)
    assert sorted(store.reads) == sorted(files)  # each file served once (the 503 aside): nothing read twice


def test_a_file_longer_than_listed_is_not_read_past_its_size():
    files = {"model.bin": b"x" * 10_000, "MLmodel": b"flavor"}
    store = SlowStore(files, listed_size=lambda path, n: 10 if path == "model.bin" else n)
    with pytest.raises(SourceChanged, match="more bytes than the 10 MLflow listed"):
        while store.client.digest_within(Digesting(URI), 60.0, 10_000, clock=store.clock) is None:
            pass
    shorter = SlowStore(files, listed_size=lambda path, n: n + 1 if path == "MLmodel" else n)
    with pytest.raises(SourceChanged, match="6 bytes, not the 7 MLflow listed"):
        shorter.client.digest_within(Digesting(URI), 60.0, 10_000, clock=shorter.clock)


def test_files_and_directories_past_the_maximum_are_counted_and_refused():
    store = SlowStore(small_files(101, per_dir=200))
    with pytest.raises(TooManyFiles) as refused:
        store.client.digest_within(Digesting(URI), 60.0, 100, clock=store.clock)
    assert (refused.value.what, refused.value.limit) == ("files", 100) and store.reads == []
    nested = SlowStore({"/".join(f"d{i}" for i in range(depth)) + "/f": b"x" for depth in range(1, 8)})
    with pytest.raises(TooManyFiles) as deep:
        nested.client.digest_within(Digesting(URI), 60.0, 5, clock=nested.clock)
    assert deep.value.what == "directories" and len(nested.lists) == 5  # counted: the sixth is never listed


def test_the_stalled_condition_names_the_limit_and_the_setting():
    state = states.too_many_files(f"spec.source: {URI}", "files", 10_000)
    stalled = next(c for c in state.conditions if c.type == "Stalled")
    assert (stalled.status, stalled.reason, state.phase) == ("True", "TooManyFiles", "Registering")
    assert stalled.message.startswith(f"spec.source: {URI} holds more than 10000 files")
    assert "--max-digest-files" in stalled.message and "SLIPWAY_MAX_DIGEST_FILES" in stalled.message
    progress = states.digesting(f"spec.source: {URI}", "digesting 3,200/10,000 files (3,200 bytes read)")
    reconciling = next(c for c in progress.conditions if c.type == "Reconciling")
    assert reconciling.reason == "Digesting" and "digesting 3,200/10,000 files" in reconciling.message
