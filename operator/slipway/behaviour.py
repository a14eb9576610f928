"""The registry of Slipway's kinds and their behaviour: what each kind package tells the frame.

A kind package registers one :class:`Registration`: its row of the kinds table, its status model and
its pass, the other Slipway objects its spec refers to (their changes wake it), the registered
model whose aliases it follows (an alias moved, by an artifact or by MLflow's webhook, wakes it and
marks it to read the alias again), the model whose aliases it moves, and its lane rule (which of its
passes take the scheduler's critical lane). The frame (watches, the pass runner, the webhook) reads
this registry only: it names no kind. Kueue and controller-runtime work the same way (a kind
declares what it owns and watches; the manager wires it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from slipway.controller import Cache, Key
from slipway.kinds import Kind
from slipway.models.base import StatusModel
from slipway.reconcile import Context

# The topic of a Cache mark set on an object that follows a model's aliases when one may have moved.
ALIASES = "aliases"

Body = Mapping[str, Any]
Spelled = Callable[[Body], "str | None"]


def spec_path(*path: str) -> Spelled:
    """A string at ``spec.<path>`` of a body, or None (a reference or a model name)."""

    def read(body: Body) -> str | None:
        node: Any = body.get("spec") or {}
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        return node if isinstance(node, str) and node else None

    return read


@dataclass(frozen=True)
class Registration:
    """One Slipway kind's behaviour, as its package registers it."""

    kind: Kind
    status: type[StatusModel]
    step: Callable[[Context], float | None]
    # The other Slipway kinds its spec names, by kind: a change to the named object wakes this one.
    refers: Mapping[str, Spelled] = field(default_factory=dict)
    # (model, alias) it follows, if any: a move of that alias wakes it, marked ``ALIASES``.
    follows: Callable[[Body], tuple[str, str] | None] | None = None
    # The registered model whose aliases a change of this object may have moved.
    moves: Spelled | None = None
    # After a pass (with its status staged in ``ctx.body``): does its next pass take the critical lane?
    # ``was`` says whether this one did. None: never.
    critical: Callable[[Context, bool], bool] | None = None

    @property
    def plural(self) -> str:
        return self.kind.plural

    @property
    def index(self) -> str:
        return self.kind.index


_REGISTERED: dict[str, Registration] = {}  # by plural, in the order the packages registered


def register(registration: Registration) -> Registration:
    """Add a kind (again: the same plural replaces it, as a module reloaded in a test would)."""
    _REGISTERED[registration.plural] = registration
    return registration


def registered() -> list[Registration]:
    return list(_REGISTERED.values())


def of(plural: str) -> Registration:
    """The kind served under ``plural``; KeyError if no package registered it."""
    return _REGISTERED[plural]


def index_keys(registration: Registration, body: Body) -> Iterator[tuple[str, ...]]:
    """The index keys besides ``name``, ``ns`` and ``owner`` that the kind's behaviour adds:
    ``("ref", kind, namespace, name)`` per reference, ``("model", namespace, model)`` when it follows."""
    namespace = body["metadata"]["namespace"]
    for kind, spelled in registration.refers.items():
        name = spelled(body)
        if name:
            yield ("ref", kind, namespace, name)
    followed = registration.follows(body) if registration.follows else None
    if followed:
        yield ("model", namespace, followed[0])


def dependents(registration: Registration, body: Body, cache: Cache) -> list[Key]:
    """The Slipway objects whose passes read this one: those whose spec names it, and those that
    follow aliases of a model it moves (each marked ``ALIASES``: its next pass reads them again)."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    keys: list[Key] = []
    for other in registered():
        if registration.kind.kind in other.refers:
            found = cache.select(other.index, "ref", registration.kind.kind, namespace, name)
            keys += [(other.plural, namespace, o["metadata"]["name"]) for o in found]
    model = registration.moves(body) if registration.moves else None
    if model:
        for key in followers(cache, namespace, model):
            cache.mark(key, ALIASES)
            keys.append(key)
    return keys


def followers(cache: Cache, namespace: str | None, model: str, alias: str | None = None) -> list[Key]:
    """Objects that follow ``model`` (its ``alias``, or any), in ``namespace`` (or any watched one)."""
    found: list[Key] = []
    for registration in registered():
        if registration.follows is None:
            continue
        index = registration.index
        keys = (
            [("model", namespace, model)]
            if namespace is not None
            else [k for k in list(cache.indexes[index]) if len(k) == 3 and k[0] == "model" and k[2] == model]
        )
        for key in keys:
            for obj in cache.select(index, *key):
                followed = registration.follows(obj)
                if followed and followed[0] == model and (alias is None or followed[1] == alias):
                    found.append((registration.plural, obj["metadata"]["namespace"], obj["metadata"]["name"]))
    return found
