"""``-o json`` and ``-o yaml`` (pure: no I/O): objects as kubectl prints them, several in a ``List``.

YAML is written here (the plugin carries no YAML library): block style, a string left plain only
where no YAML reader could take it for anything else (a number, a boolean, a date, null, an
indicator), every other string double-quoted with JSON's escapes, which YAML reads alike."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

# A plain scalar: starts with a letter, then letters, digits and a few marks; no ': ', no ' #'.
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_./@()+,=-]*(?: [A-Za-z0-9_./@()+,=-]+)*")
# YAML 1.1 reads these words (any case) as booleans or null.
_RESERVED = {"y", "yes", "n", "no", "true", "false", "on", "off", "null"}


def shown(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as kubectl prints it: without metadata.managedFields (kubectl's --show-managed-fields=false)."""
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": metadata}


def as_list(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Several objects as kubectl's ``-o json`` prints them: a ``v1`` ``List``."""
    return {"apiVersion": "v1", "kind": "List", "items": [shown(o) for o in items], "metadata": {"resourceVersion": ""}}


def to_json(value: Any) -> str:
    return json.dumps(value, indent=4, ensure_ascii=False) + "\n"


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        mantissa, e, exponent = repr(value).partition("e")
        return f"{mantissa}{'' if '.' in mantissa else '.0'}{e}{exponent}" if e else mantissa  # 1.0e+20: YAML 1.1
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text, ensure_ascii=False)


def _is_block(value: Any) -> bool:
    return isinstance(value, (Mapping, list, tuple)) and len(value) > 0


def _lines(value: Any, indent: int) -> list[str]:
    """A mapping or a sequence (not empty) as block lines at ``indent``."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if _is_block(item):
                lines.append(f"{pad}{_scalar(str(key))}:")
                lines += _lines(item, indent + (0 if isinstance(item, (list, tuple)) else 2))
            else:
                lines.append(f"{pad}{_scalar(str(key))}: {_inline(item)}")
        return lines
    for item in value:
        if _is_block(item):
            nested = _lines(item, indent + 2)
            lines.append(f"{pad}- {nested[0][indent + 2 :]}")
            lines += nested[1:]
        else:
            lines.append(f"{pad}- {_inline(item)}")
    return lines


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    return _scalar(value)


def to_yaml(value: Any) -> str:
    if not _is_block(value):
        return _inline(value) + "\n"
    return "\n".join(_lines(value, 0)) + "\n"


def render(value: Any, output: str) -> str:
    """``value`` as ``json`` or ``yaml``."""
    return to_json(value) if output == "json" else to_yaml(value)
