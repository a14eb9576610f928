"""An object as the operator's cache holds it: its JSON, deflated.

The cache keeps every object Slipway watches (its own kinds, their Deployments, Services, HPAs,
Jobs and pods) for as long as it exists, and a pass reads a handful of them. Held as Python dicts,
a settled InferenceDeployment's objects take about 30 KB even with every string shared: each dict,
list and number is an object of its own. Held as deflated JSON they take a few KB, and a pass pays
tens of microseconds to unpack each one it reads, into a copy of its own that nothing else sees
(a pass can change it freely; the cache stays as the watch delivered it).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

LEVEL = 1  # zlib's fastest: the cache is written on every watch event, on the event loop


class Packed:
    """One object, deflated; :meth:`unpack` gives a fresh copy. Equal when their bytes are."""

    __slots__ = ("data",)

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.data = zlib.compress(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(), LEVEL)

    def unpack(self) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(zlib.decompress(self.data))
        return obj

    def __eq__(self, other: object) -> bool:
        # kopf compares an index's old and new entry on every event: bytes, not two unpacks. The same
        # object as the API server sends it again packs to the same bytes (its keys in the same order).
        return isinstance(other, Packed) and self.data == other.data

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Packed({len(self.data)} bytes)"


def unpacked(value: Any) -> dict[str, Any]:
    """A cache entry as a dict of its own: unpacked, or a shallow copy of a dict (tests' plain stores)."""
    return value.unpack() if isinstance(value, Packed) else dict(value)
