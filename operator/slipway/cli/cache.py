"""The objects ``get --watch`` and ``wait`` follow: listed, then kept current by watches (one
``kubectl get --raw ...?watch=1`` stream a kind, read in a thread each)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from slipway.cli.client import ApiError, Failure, Session, api_error, api_failure, collection_path, list_kind
from slipway.cli.refs import Kind

WATCH_SECONDS = 60  # each watch request ends after this long and is made again from where it was


def decode_stream(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a watch's answer, however its bytes arrive (an object may span chunks)."""
    decoder = json.JSONDecoder()
    buffer = ""
    pending = b""
    for chunk in chunks:
        pending += chunk
        try:
            buffer += pending.decode()
        except UnicodeDecodeError:  # a character split between chunks: wait for the rest
            continue
        pending = b""
        while True:
            buffer = buffer.lstrip()
            if not buffer:
                break
            try:
                obj, end = decoder.raw_decode(buffer)
            except json.JSONDecodeError:
                break  # incomplete: wait for more
            buffer = buffer[end:]
            yield obj


def _chunks(stream: Any) -> Iterator[bytes]:
    while True:
        chunk = stream.read1(65536)
        if not chunk:
            return
        yield chunk


class Cache:
    """The objects of some kinds in the namespace, kept current by watches (one thread each); ``changed``
    gets the kind's name at every change, or the Failure a watch met."""

    def __init__(self, session: Session, kinds: Sequence[Kind], name: str | None = None) -> None:
        self.session, self.kinds, self.name = session, kinds, name
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.changed: queue.Queue[str | Failure] = queue.Queue()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.streams: set[subprocess.Popen[bytes]] = set()

    def selector(self) -> str:
        return f"metadata.name={self.name}" if self.name else ""

    def relist(self, kind: Kind) -> str:
        items, version = list_kind(self.session, kind, f"listing {kind.plural}", field_selector=self.selector())
        with self.lock:
            self.objects[kind.kind] = {o["metadata"]["name"]: o for o in items}
        return version

    def start(self) -> None:
        versions = {kind.kind: self.relist(kind) for kind in self.kinds}
        for kind in self.kinds:
            threading.Thread(target=self.watch, args=(kind, versions[kind.kind]), daemon=True).start()

    def close(self) -> None:
        """Stop watching: end the watch streams."""
        self.stop.set()
        with self.lock:
            streams = list(self.streams)
        for stream in streams:
            stream.kill()

    def items(self, kind: Kind) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.objects.get(kind.kind, {}).values())

    def get(self, kind: Kind, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.objects.get(kind.kind, {}).get(name)

    def apply(self, kind: Kind, event: dict[str, Any]) -> str | None:
        """Keep one watch event; the resourceVersion to watch on from (None: a bookmark's or an error's
        is handled by the caller)."""
        obj = event["object"]
        if event["type"] == "ERROR":
            raise ApiError(obj.get("code"), str(obj.get("message")))
        version = str(obj["metadata"]["resourceVersion"])
        if event["type"] == "BOOKMARK":
            return version
        with self.lock:
            store = self.objects.setdefault(kind.kind, {})
            if event["type"] == "DELETED":
                store.pop(obj["metadata"]["name"], None)
            else:
                store[obj["metadata"]["name"]] = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        self.changed.put(kind.kind)
        return version

    def stream_once(self, kind: Kind, version: str) -> str:
        """One watch request, to its end: the resourceVersion reached."""
        path = collection_path(
            kind.api_version,
            kind.plural,
            self.session.namespace,
            watch="1",
            resourceVersion=version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(WATCH_SECONDS),
            fieldSelector=self.selector(),
        )
        stream = self.session.kubectl.stream(path)
        with self.lock:
            self.streams.add(stream)
        try:
            assert stream.stdout is not None and stream.stderr is not None
            for event in decode_stream(_chunks(stream.stdout)):
                version = self.apply(kind, event) or version
            if stream.wait() != 0 and not self.stop.is_set():
                raise api_error(stream.stderr.read().decode(errors="replace"))
        finally:
            with self.lock:
                self.streams.discard(stream)
            stream.kill()
            stream.wait()
        return version

    def watch(self, kind: Kind, version: str) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                version = self.stream_once(kind, version)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a watch thread reports every failure, never raises
                if self.stop.is_set():
                    return
                failures += 1
                if failures > 5:
                    error = exc if isinstance(exc, ApiError) else ApiError(None, str(exc))
                    self.changed.put(api_failure(error, f"watching {kind.plural}", self.session, kind))
                    return
                try:
                    if getattr(exc, "status", None) == 410 or failures > 1:  # expired: list again
                        version = self.relist(kind)
                        self.changed.put(kind.kind)
                except Failure:
                    pass
                self.stop.wait(min(2.0**failures, 10))

    def next_change(self, timeout: float | None) -> bool:
        """Block until something changed (True) or ``timeout`` passed (False); raise a watch's Failure."""
        try:
            item = self.changed.get(timeout=timeout)
        except queue.Empty:
            return False
        if isinstance(item, Failure):
            raise item
        while not self.changed.empty():  # one redraw for a burst of events
            more = self.changed.get_nowait()
            if isinstance(more, Failure):
                raise more
        return True
