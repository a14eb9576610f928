"""kopf as Slipway runs it: the kopf versions it was tested with, four start-up patches (kopf's index
toggles; managedFields dropped as objects arrive; bodies slimmed once indexed; discovery repeated
until the API serves Slipway's kinds; applied on import, on those versions only), and a diff-base
storage that keeps nothing."""

from __future__ import annotations

import importlib
from typing import Any

import kopf

# The kopf versions the start-up patch below was tested with (constraints.txt pins the first). On any
# other the patch is not applied: kopf's private classes may have changed under the same names.
TESTED_KOPF = ("1.45.2",)


def kopf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kopf")
    except PackageNotFoundError:
        return "unknown"


def kopf_refusal(found: str | None = None) -> str | None:
    """Why the start-up patch of kopf is not applied (an untested kopf), or None."""
    found = found or kopf_version()
    if found in TESTED_KOPF:
        return None
    return (
        f"kopf {found} is not a version Slipway was tested with ({', '.join(TESTED_KOPF)}): its start-up "
        "patch is off, so a fresh operator with many objects starts slower; install the pinned versions "
        "(pip install -c constraints.txt)"
    )


def wake_index_waiters_only_on_change() -> bool:
    """kopf holds every handler until every indexed object has been indexed once: each object's
    worker waits on one toggle set, and each object indexed drops its own toggle, which woke every
    waiter (``notify_all``) though the set stays off until the last one goes: O(objects²) wake-ups
    at start. With 4,500 watched objects (1,300 Slipway objects, their Jobs, pods, Services) a
    fresh operator did nothing for 104 s. Here adding or dropping a toggle wakes the waiters only
    when it changes the set's state, the only thing they wait for. True if kopf was patched; never
    on a kopf version it was not tested with (``kopf_refusal``)."""
    if kopf_refusal() is not None:
        return False
    try:
        from kopf._cogs.aiokits.aiotoggles import Toggle, ToggleSet
    except ImportError:  # another kopf layout: left as it is
        return False
    if getattr(ToggleSet, "_slipway_wakes_on_change", False):
        return True
    if not all(callable(getattr(ToggleSet, name, None)) for name in ("make_toggle", "drop_toggle", "is_on")):
        return False

    async def make_toggle(self: Any, __val: bool = False, *, name: str | None = None) -> Any:
        toggle = Toggle(__val, name=name, condition=self._condition)
        async with self._condition:
            before = self.is_on()
            self._toggles.add(toggle)
            if self.is_on() != before:
                self._condition.notify_all()
        return toggle

    async def drop_toggle(self: Any, toggle: Any) -> None:
        async with self._condition:
            before = self.is_on()
            self._toggles.discard(toggle)
            if self.is_on() != before:
                self._condition.notify_all()

    ToggleSet.make_toggle = make_toggle  # type: ignore[method-assign]
    ToggleSet.drop_toggle = drop_toggle  # type: ignore[method-assign]
    setattr(ToggleSet, "_slipway_wakes_on_change", True)  # noqa: B010 - a marker kopf's class has no field for
    return True


wake_index_waiters_only_on_change()


def _wrap(module_path: str, name: str, marker: str, wrap: Any) -> bool:
    """Replace ``module_path.name`` (a kopf internal) by ``wrap(original)``, once (``marker`` on the
    replacement); True if it is in place. Never on a kopf version Slipway was not tested with, nor on
    another layout of kopf's modules."""
    if kopf_refusal() is not None:
        return False
    try:
        module = importlib.import_module(module_path)
    except ImportError:  # another kopf layout: left as it is
        return False
    original = getattr(module, name, None)
    if original is None or getattr(original, marker, False):
        return original is not None
    replacement = wrap(original)
    setattr(replacement, marker, True)
    setattr(module, name, replacement)
    return True


def drop_managed_fields_as_they_arrive() -> bool:
    """kopf gives each watched object a worker, and at a start every worker holds its object's body
    until every object of every kind has been indexed (the handlers wait for that): 5 x N bodies at
    once for N InferenceDeployments, the operator's peak memory. Nothing in Slipway or kopf reads
    ``metadata.managedFields``, a third of a pod's or a Job's body and more of a Deployment's: here
    it is dropped from every listed and watched object as it arrives, before it is queued. True if
    kopf was patched; never on a kopf version it was not tested with (``kopf_refusal``)."""

    def wrap(original: Any) -> Any:
        async def continuous_watch(**kwargs: Any) -> Any:
            async for event in original(**kwargs):
                obj = event.get("object") if isinstance(event, dict) else None
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                if isinstance(meta, dict):
                    meta.pop("managedFields", None)
                yield event

        return continuous_watch

    return _wrap("kopf._cogs.clients.watching", "continuous_watch", "_slipway_drops_managed_fields", wrap)


drop_managed_fields_as_they_arrive()

# What of an object its kopf event handlers read once it is indexed (slipway.watches and the kinds'
# watches): the metadata of every object (owners, labels, uid, revision, annotations), and the spec of
# Slipway's own (the models a ModelArtifact moves). Passes read the cache, never kopf's body.
KEPT_FOR_HANDLERS = ("apiVersion", "kind", "metadata")
KEPT_OF_OWN_KINDS = (*KEPT_FOR_HANDLERS, "spec")


def kept_after_indexing(obj: dict[str, Any], group: str) -> None:
    """Drop in place what no handler reads of an indexed object (its children's spec and status)."""
    api = str(obj.get("apiVersion") or "")
    keep = KEPT_OF_OWN_KINDS if api.startswith(f"{group}/") else KEPT_FOR_HANDLERS
    for key in [k for k in obj if k not in keep]:
        del obj[key]


def slim_bodies_once_indexed() -> bool:
    """At a start every object's worker holds its event until every object of every kind has been
    indexed; the indexes took their own packed copy already. Here, once kopf has indexed an event,
    the body it holds keeps only what the event handlers read (:func:`kept_after_indexing`): at a
    restart over 10,000 InferenceDeployments (about 50,000 objects) the held bodies were most of a
    1.6 GB peak. True if kopf was patched; never on a kopf version it was not tested with."""
    from slipway import GROUP

    def wrap(original: Any) -> Any:
        async def index_resource(**kwargs: Any) -> None:
            await original(**kwargs)
            event = kwargs.get("raw_event")
            obj = event.get("object") if isinstance(event, dict) else None
            if isinstance(obj, dict):
                kept_after_indexing(obj, GROUP)

        return index_resource

    return _wrap("kopf._core.engines.indexing", "index_resource", "_slipway_slims", wrap)


slim_bodies_once_indexed()

# The resources a running operator cannot do without: its own kinds (the CRDs its chart installs) and
# the built-in kinds it makes. Optional ones (Kueue, JobSet, Gateway API, GIE, KEDA) may be absent.
REQUIRED_RESOURCES = (
    ("slipway.dev", "trainingruns"),
    ("slipway.dev", "modelartifacts"),
    ("slipway.dev", "inferencedeployments"),
    ("", "pods"),
    ("", "services"),
    ("apps", "deployments"),
    ("batch", "jobs"),
    ("autoscaling", "horizontalpodautoscalers"),
)
DISCOVERY_DEADLINE = 120.0  # seconds a scan is repeated while a required resource is missing
DISCOVERY_RETRY = 2.0


def missing_resources(found: Any, groups: Any) -> list[str]:
    """The required resources (of the groups asked, all when None) absent from a discovery's answer."""
    have = {(r.group, r.plural) for r in found}
    asked = [(g, p) for g, p in REQUIRED_RESOURCES if groups is None or g in groups]
    return [f"{p}.{g}" if g else p for g, p in asked if (g, p) not in have]


async def scan_until_served(scan: Any, kwargs: dict[str, Any], deadline: float, retry: float) -> Any:
    """``scan(**kwargs)`` again every ``retry`` seconds while it misses a required resource, for up to
    ``deadline`` seconds; the last answer."""
    import asyncio
    import logging
    import time

    until = time.monotonic() + deadline
    while True:
        found = await scan(**kwargs)
        missing = missing_resources(found, kwargs.get("groups"))
        if not missing or time.monotonic() >= until:
            return found
        logging.getLogger(__name__).warning(
            "the API server does not serve %s yet: discovering again in %.0f s", ", ".join(missing), retry
        )
        await asyncio.sleep(retry)


def rescan_until_served(deadline: float = DISCOVERY_DEADLINE, retry: float = DISCOVERY_RETRY) -> bool:
    """kopf discovers the API's resources once at start and serves only those it found; without the
    right to watch CRDs it never looks again. An API server that has just started answers discovery
    before it serves every group (its CRDs, autoscaling/v2): an operator started then would never
    watch its own kinds. Here a scan that misses a required resource is repeated every ``retry``
    seconds for up to ``deadline`` seconds (then kopf goes on with what it found, and says what is
    unresolved). True if kopf was patched; never on a kopf version it was not tested with."""

    def wrap(original: Any) -> Any:
        async def scan_resources(**kwargs: Any) -> Any:
            return await scan_until_served(original, kwargs, deadline, retry)

        return scan_resources

    return _wrap("kopf._cogs.clients.scanning", "scan_resources", "_slipway_rescans", wrap)


rescan_until_served()


class NoDiffBase(kopf.DiffBaseStorage):
    """Slipway registers no change-detecting kopf handlers (on.create, on.update, on.field): only
    indexes and on.event, which get every event whole. kopf's default diffs each event against
    the configuration last handled, which costs a deep copy of each object on each event (a tenth
    of the operator's CPU while a sweep arrives) and serves nothing here: none is built or kept."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return None

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None
