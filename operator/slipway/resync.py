"""A cache that forgets what was deleted while its watch was away.

kopf's indexes learn of a delete only from a DELETED event. When a watch breaks for longer than the
API server keeps events (a partition, an API server restart), kopf lists again, and the objects that
vanished in the gap get no event at all: their index entries stay for ever. A child deleted meanwhile
would still be "kept", a deleted parent reconciled again.

So after kopf lists anything again (its listing events have no type), the operator lists, once and
with the same server-side selectors, the kinds it caches, and every cached object absent from that
list and not newer than it is *gone*: :class:`~slipway.controller.Cache` stops returning it, and the
objects it concerned (its owner; itself, for a Slipway object) are woken. The lists are debounced
(one round ``DELAY`` seconds after the last listing event), so a start-up costs one round.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from slipway import GROUP, kinds, kube
from slipway.controller import Cache, Key, Scheduler, owner_keys

log = logging.getLogger(__name__)

DELAY = 5.0
Lister = Callable[[kube.Kube, "str | None", str], Any]


# What the heal reads of a list: the uids and the list's resourceVersion. The API server answers with
# each object's metadata only (PartialObjectMetadataList, as client-go's metadata informers ask), in
# pages: a round at 3,000 InferenceDeployments no longer parses every pod and Deployment whole (it
# took a quarter of a start's CPU and as much memory as the cache).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PAGE = 500


def _paged(list_page: Callable[..., Any]) -> dict[str, Any]:
    """Every page of a list, metadata only, as one answer: ``{"items": [...], "metadata": {...}}``
    (the first page's resourceVersion: a paged list is one snapshot)."""
    items: list[Any] = []
    first: dict[str, Any] | None = None
    token = ""
    while True:
        kw = {"_continue": token} if token else {}
        answer = list_page(
            limit=PAGE,
            _headers={"Accept": METADATA_ONLY},
            _preload_content=False,
            _request_timeout=kube.REQUEST_TIMEOUT,
            **kw,
        )
        page = json.loads(answer.data)
        items += [
            {"metadata": {k: m.get(k) for k in ("uid", "resourceVersion")}}
            for m in ((i.get("metadata") or {}) for i in page.get("items") or [])
        ]
        first = first or page
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return {
                "items": items,
                "metadata": {"resourceVersion": (first.get("metadata") or {}).get("resourceVersion")},
            }


def _typed(api: str, suffix: str) -> Lister:
    """The typed client's lists of a kind (``suffix`` as in ``list_<suffix>``, e.g. ``namespaced_job``)."""
    namespaced, cluster = f"list_{suffix}", f"list_{suffix.removeprefix('namespaced_')}_for_all_namespaces"

    def lister(k: kube.Kube, namespace: str | None, selector: str) -> Any:
        client = getattr(k, api)
        if namespace:
            return _paged(functools.partial(getattr(client, namespaced), namespace, label_selector=selector))
        return _paged(functools.partial(getattr(client, cluster), label_selector=selector))

    return lister


def _custom(group: str, version: str, plural: str) -> Lister:
    def lister(k: kube.Kube, namespace: str | None, selector: str) -> Any:
        if namespace:
            return _paged(
                functools.partial(
                    k.custom.list_namespaced_custom_object, group, version, namespace, plural, label_selector=selector
                )
            )
        return _paged(
            functools.partial(k.custom.list_cluster_custom_object, group, version, plural, label_selector=selector)
        )

    return lister


def _lister(k: kinds.Kind) -> Lister:
    return _typed(*k.typed) if k.typed else _custom(k.group, k.version, k.plural)


# Every namespaced kind the cache holds (kinds.py), by its own index: (how to list it, the indexes
# that cache it, whether it is listed with the managed-by selector). Namespaces are not healed.
resources = kinds.derived(
    lambda table: {k.index: (_lister(k), k.indexes, k.managed) for k in table if k.indexes and k.namespaced}
)


def _meta(obj: Any) -> tuple[str, str]:
    """(uid, resourceVersion) of a typed or plain object."""
    if isinstance(obj, Mapping):
        meta = obj.get("metadata") or {}
        return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
    return str(obj.metadata.uid or ""), str(obj.metadata.resource_version or "")


def listing(answer: Any) -> tuple[set[str], int]:
    """(the uids a list answer holds, the resourceVersion it was taken at)."""
    if isinstance(answer, Mapping):
        items, version = answer.get("items") or [], str((answer.get("metadata") or {}).get("resourceVersion") or "")
    else:
        items, version = answer.items or [], str(answer.metadata.resource_version or "")
    return {_meta(item)[0] for item in items}, int(version) if version.isdigit() else 0


def stale(cached: Iterable[Mapping[str, Any]], uids: set[str], version: int) -> list[Mapping[str, Any]]:
    """The cached objects a list taken at ``version`` shows are gone: absent from it, and not newer."""
    found = []
    for obj in cached:
        uid, revision = _meta(obj)
        if uid and uid not in uids and revision.isdigit() and int(revision) <= version:
            found.append(obj)
    return found


def cached_objects(cache: Cache, index: str) -> list[Mapping[str, Any]]:
    """Every object an index holds: its "name" entries (each object once), or every entry of an
    index without them. Only those are unpacked: at a start over 3,000 InferenceDeployments, unpacking
    every entry under every key on the event loop was half of a heal round."""
    keys = cache.keys(index)
    named = [key for key in keys if key and key[0] == "name"]
    seen: dict[str, Mapping[str, Any]] = {}
    for key in named or keys:
        for obj in cache.select(index, *key):
            seen[_meta(obj)[0]] = obj
    return list(seen.values())


def gone_from(
    cache: Cache, tables: Mapping[str, Any], listed: Mapping[str, tuple[set[str], int]]
) -> list[Mapping[str, Any]]:
    """The cached objects the lists show are gone (a worker thread's work: it unpacks every one)."""
    return [
        obj
        for resource, (uids, version) in listed.items()
        for index in tables[resource][1]
        for obj in stale(cached_objects(cache, index), uids, version)
    ]


class Healer:
    """Runs one round of lists ``DELAY`` seconds after kopf's last listing event; marks what is gone."""

    def __init__(
        self,
        kube_client: kube.Kube,
        cache: Cache,
        scheduler: Scheduler,
        namespaces: Iterable[str],
        plurals: Mapping[str, str],
        selector: str,
        delay: float = DELAY,
    ) -> None:
        self.kube, self.cache, self.scheduler = kube_client, cache, scheduler
        self.namespaces: list[str | None] = [*namespaces] or [None]
        self.plurals, self.selector, self.delay = plurals, selector, delay
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.forgotten = 0

    def relisted(self) -> None:
        """kopf listed something (again): one round, ``delay`` after the last such event. Event loop."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(self.delay, self._start)

    def _start(self) -> None:
        self.timer = None
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self.heal(), name="slipway cache heal")
        else:  # a round is running: one more after it
            self.relisted()

    async def heal(self) -> None:
        listed: dict[str, tuple[set[str], int]] = {}
        tables = resources()
        for resource, (lister, _, selected) in tables.items():
            try:
                listed[resource] = await asyncio.to_thread(self._list, lister, "" if not selected else self.selector)
            except Exception as exc:  # an absent CRD (HTTPRoute without Gateway API), the API away: next time
                log.debug("cache heal: cannot list %s: %s", resource, exc)
        self.rounds += 1
        for obj in await asyncio.to_thread(gone_from, self.cache, tables, listed):
            self._forget(obj)

    def _list(self, lister: Lister, selector: str) -> tuple[set[str], int]:
        uids: set[str] = set()
        version = 0
        for namespace in self.namespaces:
            found, at = listing(lister(self.kube, namespace, selector))
            uids |= found
            version = max(version, at) if version == 0 else min(version, at)
        return uids, version

    def _forget(self, obj: Mapping[str, Any]) -> None:
        uid, _ = _meta(obj)
        meta = obj.get("metadata") or {}
        self.cache.gone.add(uid)
        self.forgotten += 1
        log.info(
            "cache heal: %s %s/%s (uid %s) was deleted while a watch was away: forgotten",
            obj.get("kind"),
            meta.get("namespace"),
            meta.get("name"),
            uid,
        )
        wake: list[Key] = list(owner_keys(obj, self.plurals))
        plural = self.plurals.get(str(obj.get("kind")))
        if plural and str(obj.get("apiVersion", "")).startswith(f"{GROUP}/"):
            key: Key = (plural, str(meta.get("namespace")), str(meta.get("name")))
            self.cache.forget(key)
            self.scheduler.forget(key)  # its timers and lanes; the pass woken below finds it gone
            wake.append(key)
        for key in wake:
            self.scheduler.wake(key)
