"""Every PromQL query Slipway runs stays in its object's namespace.

A metric's ``query`` is the user's own PromQL, and the Prometheus it runs on is shared by every
team. :func:`confine` gives each vector selector of a query the matcher ``namespace="<ns>"`` (the
label Kubernetes pod discovery sets); a selector that matches the namespace label any other way
(another namespace, a regular expression, a negation) is refused with :class:`ConfinementError`.
Range brackets, label lists (``by (...)``, ``on (...)``) and strings are passed through untouched.
"""

from __future__ import annotations

import re

NAMESPACE_LABEL = "namespace"

_TOKEN = re.compile(
    r"""
     (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<space>\s+|\#[^\n]*)
    |(?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*|:[a-zA-Z_:][a-zA-Z0-9_:]*)
    |(?P<number>0[xX][0-9a-fA-F]+|(?:[0-9]*\.)?[0-9]+(?:[eE][+-]?[0-9]+)?(?:[0-9]*(?:ms|[smhdwy]))*)
    |(?P<op>=~|!~|!=|==|<=|>=|[{}()\[\],:=<>+\-*/%^@])
    """,
    re.VERBOSE,
)
# Words that are never a metric name where they stand.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
             "unless", "atan2", "inf", "nan"}  # fmt: skip
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                 "quantile", "limitk", "limit_ratio"}  # fmt: skip


class ConfinementError(ValueError):
    """A query that would read outside its namespace, or that cannot be read."""


def _tokens(query: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(query):
        match = _TOKEN.match(query, pos)
        if match is None:
            raise ConfinementError(f"cannot read the query at {query[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(0)))
        pos = match.end()
    return out


def _next(tokens: list[tuple[str, str]], i: int) -> tuple[int, str]:
    """The index and text of the first token from ``i`` that is not space (``len``, "" at the end)."""
    while i < len(tokens) and tokens[i][0] == "space":
        i += 1
    return (i, tokens[i][1]) if i < len(tokens) else (i, "")


def _closing(tokens: list[tuple[str, str]], i: int, opening: str, closing: str) -> int:
    """The index of the token that closes the bracket opened at ``i``."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j][1] == opening:
            depth += 1
        elif tokens[j][1] == closing:
            depth -= 1
            if depth == 0:
                return j
    raise ConfinementError(f"unbalanced {opening!r} in the query")


def _unquote(text: str) -> str:
    if text[:1] == "`":
        return text[1:-1]
    return bytes(text[1:-1], "utf-8").decode("unicode_escape")


def _matchers(tokens: list[tuple[str, str]], namespace: str) -> str:
    """The inside of one selector's braces with the namespace matcher (refusing any other)."""
    items: list[list[tuple[str, str]]] = [[]]
    for token in tokens:
        if token[1] == ",":
            items.append([])
        elif token[0] != "space":
            items[-1].append(token)
    kept, has_namespace = [], False
    for item in items:
        if not item:
            continue
        texts = [t for _, t in item]
        if len(item) == 1 and item[0][0] == "string":  # a quoted metric name: {"name", ...}
            kept.append(texts[0])
            continue
        if len(item) != 3 or item[0][0] not in ("ident", "string") or item[2][0] != "string":
            raise ConfinementError(f"cannot read the label matcher {' '.join(texts)!r}")
        label = _unquote(texts[0]) if item[0][0] == "string" else texts[0]
        if label == NAMESPACE_LABEL:
            if texts[1] != "=" or _unquote(texts[2]) != namespace:
                raise ConfinementError(
                    f"the matcher {''.join(texts)} reads outside the namespace {namespace}; "
                    f'leave it out (Slipway adds {NAMESPACE_LABEL}="{namespace}") or use {{{{ namespace }}}}'
                )
            has_namespace = True
        kept.append(f"{texts[0]}{texts[1]}{texts[2]}")
    if not has_namespace:
        kept.append(f'{NAMESPACE_LABEL}="{namespace}"')
    return ", ".join(kept)


def confine(query: str, namespace: str) -> str:
    """``query`` with ``namespace="<namespace>"`` in every vector selector (see the module's doc)."""
    tokens = _tokens(query)
    texts = [t for _, t in tokens]
    if texts.count("(") != texts.count(")"):
        raise ConfinementError("unbalanced '(' in the query")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        if text == "[":  # a range or subquery: durations only
            end = _closing(tokens, i, "[", "]")
            out += [t for _, t in tokens[i : end + 1]]
            i = end + 1
            continue
        if text == "{":  # a selector without a metric name
            end = _closing(tokens, i, "{", "}")
            out.append("{" + _matchers(tokens[i + 1 : end], namespace) + "}")
            i = end + 1
            continue
        if kind != "ident":
            out.append(text)
            i += 1
            continue
        after, following = _next(tokens, i + 1)
        word = text.lower()
        if word in _LABEL_LISTS and following == "(":
            end = _closing(tokens, after, "(", ")")
            out += [t for _, t in tokens[i : end + 1]]
            i = end + 1
            continue
        if word in _KEYWORDS or following == "(" or (text in _AGGREGATIONS and following in ("by", "without")):
            out.append(text)
            i += 1
            continue
        # A metric name: its selector gets the matcher.
        if following == "{":
            end = _closing(tokens, after, "{", "}")
            out += [text, *(t for _, t in tokens[i + 1 : after])]
            out.append("{" + _matchers(tokens[after + 1 : end], namespace) + "}")
            i = end + 1
        else:
            out.append(f'{text}{{{NAMESPACE_LABEL}="{namespace}"}}')
            i += 1
    return "".join(out)
