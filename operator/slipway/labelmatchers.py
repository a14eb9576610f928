"""PromQL label matchers an admin writes in a setting (``job="opencost",pod=""``), checked (pure).

Only what a selector's braces may hold: comma-separated ``name op "value"`` with op one of ``=``,
``!=``, ``=~``, ``!~``, a double-quoted value without a line break; no ``__name__`` (the caller
names the metrics). So a setting can narrow a query and nothing else.
"""

from __future__ import annotations

import re

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\\r\n]|\\[^\r\n])*)"\s*')


def check(text: str, where: str) -> str:
    """``text`` as one normal form (``a="b",c=~"d"``); ValueError naming ``where`` and what is wrong."""
    matchers, rest = [], text.strip()
    while rest:
        found = _MATCHER.match(rest)
        if found is None:
            raise ValueError(f'{where}: {text!r} is not a list of label matchers such as job="opencost",pod=""')
        name, op, value = found.groups()
        if name == "__name__":
            raise ValueError(f"{where}: {text!r} names __name__; the metrics are Slipway's to name")
        matchers.append(f'{name}{op}"{value}"')
        rest = rest[found.end() :]
        if rest and not rest.startswith(","):
            raise ValueError(f"{where}: {text!r}: matchers are separated by commas")
        rest = rest[1:].strip()
    if not matchers:
        raise ValueError(f'{where}: empty; name the scrape target, e.g. job="opencost"')
    return ",".join(matchers)
