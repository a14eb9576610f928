"""What an MLflow tag of Slipway's is, and how it is read: every name is ``slipway.dev/<name>``, and a
tag that earlier Slipway versions (or programs written for them) spelled ``slipway.<a>.<b>`` is
still read under that name (:meth:`Tag.read`), so that runs and versions already in MLflow keep
working after an upgrade and a program that sets the old name is still understood; Slipway writes
the new name only. The tags themselves are in slipway.mlflow.tags (the whole table) and
slipway.mlflow.programtags (those the programs Slipway runs set)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

PREFIX = "slipway.dev/"
OPERATOR = "operator"


@dataclass(frozen=True)
class Tag:
    """One MLflow tag (or, with ``family``, one per key after the name, e.g. ``slipway.dev/metric-<key>``)."""

    name: str
    on: str  # the MLflow objects that carry it
    written_by: str
    read_by: str  # who reads it and what for ("nobody": for people looking at MLflow)
    meaning: str
    formerly: str = ""  # the name earlier versions wrote: still read
    family: bool = False

    def of(self, key: str) -> Tag:
        """The member ``key`` of a family: ``slipway.dev/metric-`` -> ``slipway.dev/metric-accuracy``."""
        assert self.family, f"{self.name} is not a family of tags"
        return replace(self, name=self.name + key, formerly=self.formerly + key if self.formerly else "", family=False)

    def read(self, tags: Mapping[str, str]) -> str | None:
        """The value under the tag's name, else under its former name; None when neither is set."""
        if self.name in tags:
            return tags[self.name]
        if self.formerly and self.formerly in tags:
            return tags[self.formerly]
        return None

    def where(self, tags: Mapping[str, str]) -> str:
        """The name the value :meth:`read` returns is under (the name itself when neither is set)."""
        return self.formerly if self.name not in tags and self.formerly and self.formerly in tags else self.name

    def members(self, tags: Mapping[str, str]) -> dict[str, str]:
        """A family's members in ``tags``: key -> the name its value is under (the new name wins)."""
        found: dict[str, str] = {}
        for prefix in (self.formerly, self.name) if self.formerly else (self.name,):
            found |= {name[len(prefix) :]: name for name in tags if name.startswith(prefix) and name != prefix}
        return found


def tag(
    name: str, on: str, written_by: str, read_by: str, meaning: str, formerly: str = "", family: bool = False
) -> Tag:
    """The tag ``slipway.dev/<name>``."""
    return Tag(PREFIX + name, on, written_by, read_by, meaning, formerly, family)
