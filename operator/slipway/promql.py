"""Every PromQL query Slipway runs stays in its object's namespace.

A metric's ``query`` is the user's own PromQL, and the Prometheus it runs on is shared by every
team. :func:`confine` gives each vector selector of a query the matcher ``namespace="<ns>"`` (the
label Kubernetes pod discovery sets); a selector that matches the namespace label any other way
(another namespace, a regular expression, a negation) is refused with :class:`ConfinementError`.

The query is read as Prometheus' own lexer and grammar read it (Prometheus 3.16): comments are
removed before it is sent, control characters are refused, and every identifier that Prometheus
could read as a metric name gets the matcher. Only what cannot be a metric name where it stands
is left as written: a function's or aggregation's name before ``(``, the keywords that are never
metric names (``bool``, ``on``, ``ignoring``, ``group_left``, ``group_right``, ``atan2``), the
numbers ``Inf`` and ``NaN``, and ``and``/``or``/``unless``/``offset``/``smoothed``/``anchored``/
``by``/``without`` where an operand has just ended (``sum(or)`` reads the metric ``or``, and is
confined). Label lists (``by (...)``, ``on (...)``), ranges and strings are passed through once
checked. ``tests/unit/prometheus/test_promql_fuzz.py`` holds this against Prometheus' parser.
"""

from __future__ import annotations

import re
import unicodedata

NAMESPACE_LABEL = "namespace"

_NUMBER = r"0[xX][0-9a-fA-F]+|(?:[0-9]*\.)?[0-9]+(?:[eE][+-]?[0-9]+)?(?:[0-9]*(?:ms|[smhdwy]))*"
_TOKEN = re.compile(
    rf"""
     (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
    |(?P<comment>\#[^\n]*)
    |(?P<space>[ \t\n]+)
    |(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    |(?P<number>{_NUMBER})
    |(?P<range>\[)
    |(?P<op>=~|!~|!=|==|<=|>=|</|>/|[{{}}()\],=<>+\-*/%^@])
    """,
    re.VERBOSE,
)
# Inside a range or subquery's brackets: durations and their arithmetic only.
_RANGE_TOKEN = re.compile(
    rf"(?P<comment>\#[^\n]*)|(?P<space>[ \t\n]+)|(?P<number>{_NUMBER})|(?P<word>[a-zA-Z_]+)|(?P<op>[:()+\-*/%^,\]])"
)
_RANGE_WORDS = {"step", "range", "min", "max", "max_of", "min_of"}
# Prometheus' keywords that its grammar never takes as a metric name.
_NEVER_METRIC = {"bool", "on", "ignoring", "group_left", "group_right", "atan2"}
_LABEL_LISTS = {"on", "ignoring", "group_left", "group_right"}
_AGGREGATIONS = {
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
}
_FILLS = {"fill", "fill_left", "fill_right"}
_MATCH_OPS = {"=", "!=", "=~", "!~"}
_REFUSED_FUNCTIONS = {
    "info": "info() joins info series (target_info) from every namespace; "
    "join them with `* on (instance, job) group_left (...) target_info` instead"
}
_ESCAPE = re.compile(r"""\\(?:([abfnrtv\\'"])|x([0-9a-fA-F]{2})|([0-7]{3})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))""")
_ESCAPED = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"'}

Token = tuple[str, str]


class ConfinementError(ValueError):
    """A query that would read outside its namespace, or that cannot be read."""


def _refuse_control_characters(query: str) -> None:
    for pos, char in enumerate(query):
        if char not in "\t\n" and unicodedata.category(char) in ("Cc", "Cs"):
            raise ConfinementError(
                f"the query holds the control character {char!r} at {pos}: write it with spaces, tabs and newlines only"
            )


def _range(query: str, pos: int) -> tuple[str, int]:
    """The text of the range or subquery brackets opened at ``pos`` (comments removed), and its end."""
    out, i = ["["], pos + 1
    while True:
        match = _RANGE_TOKEN.match(query, i)
        if match is None or (match.lastgroup == "word" and match.group(0).lower() not in _RANGE_WORDS):
            raise ConfinementError(f"cannot read the range at {query[pos : i + 20]!r}: durations only")
        i = match.end()
        if match.lastgroup != "comment":
            out.append(match.group(0))
        if match.group(0) == "]":
            return "".join(out), i


def _tokens(query: str) -> list[Token]:
    """The query's tokens, comments left out (they never reach Prometheus)."""
    out: list[Token] = []
    pos = 0
    while pos < len(query):
        match = _TOKEN.match(query, pos)
        if match is None:
            raise ConfinementError(f"cannot read the query at {query[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        if kind == "range":
            text, pos = _range(query, pos)
            out.append(("range", text))
            continue
        if kind != "comment":
            out.append((kind, match.group(0)))
        pos = match.end()
    return out


def _unquote(text: str) -> str:
    """A string token's value, as Prometheus reads it (Go's escapes); refused where it would not read it."""
    quote, body = text[0], text[1:-1]
    if quote == "`":
        return body
    out, pos = bytearray(), 0
    for match in _ESCAPE.finditer(body):
        if "\\" in body[pos : match.start()]:
            break
        out += body[pos : match.start()].encode()
        char, hexa, octal, u4, u8 = match.groups()
        if char is not None and char in "'\"" and char != quote:
            break
        if char is not None:
            out += _ESCAPED[char].encode()
        elif hexa or octal:
            value = int(hexa, 16) if hexa else int(octal, 8)
            if value > 255:
                break
            out.append(value)
        else:
            code = int(u4 or u8, 16)
            if code > 0x10FFFF or 0xD800 <= code < 0xE000:
                break
            out += chr(code).encode()
        pos = match.end()
    else:
        if "\\" not in body[pos:]:
            try:
                return (out + body[pos:].encode()).decode()
            except UnicodeDecodeError:
                pass
    raise ConfinementError(f"cannot read the string {text}")


def _matchers(tokens: list[Token], namespace: str) -> str:
    """The inside of one selector's braces with the namespace matcher (refusing any other)."""
    items: list[list[Token]] = [[]]
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
            _unquote(texts[0])
            kept.append(texts[0])
            continue
        if (
            len(item) != 3
            or item[0][0] not in ("ident", "string")
            or ":" in texts[0]
            or texts[1] not in _MATCH_OPS
            or item[2][0] != "string"
        ):
            raise ConfinementError(f"cannot read the label matcher {' '.join(texts)!r}")
        label = _unquote(texts[0]) if item[0][0] == "string" else texts[0]
        if label == NAMESPACE_LABEL:
            if texts[1] != "=" or _unquote(texts[2]) != namespace:
                raise ConfinementError(
                    f"the matcher {''.join(texts)} reads outside the namespace {namespace}; "
                    f'leave it out (Slipway adds {NAMESPACE_LABEL}="{namespace}") or use {{{{ namespace }}}}'
                )
            has_namespace = True
        _unquote(texts[2])
        kept.append(f"{texts[0]}{texts[1]}{texts[2]}")
    if not has_namespace:
        kept.append(f'{NAMESPACE_LABEL}="{namespace}"')
    return ", ".join(kept)


class _Confiner:
    """One pass over a query's tokens: ``operand`` is whether an operand may start where it stands."""

    def __init__(self, tokens: list[Token], namespace: str) -> None:
        self.tokens, self.namespace = tokens, namespace
        self.out: list[str] = []
        self.operand = True
        self.aggregation = False  # an aggregation's name was just read: `by`/`without` follows
        self.closes: list[bool] = []  # for each open "(": whether an operand may start after its ")"

    def next(self, i: int) -> tuple[int, str]:
        """The index and text of the first token from ``i`` that is not space (``len``, "" at the end)."""
        while i < len(self.tokens) and self.tokens[i][0] == "space":
            i += 1
        return (i, self.tokens[i][1]) if i < len(self.tokens) else (i, "")

    def copy(self, start: int, end: int) -> int:
        self.out += [t for _, t in self.tokens[start:end]]
        return end

    def label_list(self, i: int) -> int:
        """Copies a label list ``(a, "b.c")`` that starts at or after ``i``; the index after it."""
        start, _ = self.next(i)
        end = start + 1
        while end < len(self.tokens) and self.tokens[end][1] != ")":
            kind, text = self.tokens[end]
            if kind not in ("ident", "string", "space") and text != ",":
                raise ConfinementError(f"cannot read the label list at {text!r}: label names only")
            if kind == "string":
                _unquote(text)
            end += 1
        if end == len(self.tokens):
            raise ConfinementError("unbalanced '(' in the query")
        return self.copy(i, end + 1)

    def selector(self, i: int, name: str | None) -> int:
        """Writes the selector whose metric name (if any) is ``name`` at ``i``; the index after it."""
        if name is not None:
            self.out.append(name)
            after, following = self.next(i + 1)
            if following != "{":
                self.out.append(f'{{{NAMESPACE_LABEL}="{self.namespace}"}}')
                self.operand = False
                return i + 1
            self.copy(i + 1, after)
            i = after
        end = i + 1
        while end < len(self.tokens) and self.tokens[end][1] != "}":
            if self.tokens[end][1] == "{":
                raise ConfinementError("unexpected '{' inside a selector's braces")
            end += 1
        if end == len(self.tokens):
            raise ConfinementError("unbalanced '{' in the query")
        self.out.append("{" + _matchers(self.tokens[i + 1 : end], self.namespace) + "}")
        self.operand = False
        return end + 1

    def identifier(self, i: int, text: str) -> int:
        word, (after, following) = text.lower(), self.next(i + 1)
        aggregation, self.aggregation = self.aggregation, False
        if word in ("inf", "nan") or word in _NEVER_METRIC:
            self.out.append(text)
            self.operand = word in _NEVER_METRIC
            return self.label_list(i + 1) if word in _LABEL_LISTS and following == "(" else i + 1
        if word in ("by", "without") and following == "(" and (aggregation or not self.operand):
            self.out.append(text)
            self.operand = aggregation
            return self.label_list(i + 1)
        if following == "(":
            if text in _REFUSED_FUNCTIONS:
                raise ConfinementError(_REFUSED_FUNCTIONS[text])
            self.copy(i, after + 1)
            self.closes.append(word in _FILLS)
            self.operand = True
            return after + 1
        if self.operand and word in _AGGREGATIONS and following.lower() in ("by", "without"):
            self.out.append(text)
            self.aggregation = True
            return i + 1
        if not self.operand and word in ("and", "or", "unless", "offset", "smoothed", "anchored"):
            self.out.append(text)
            self.operand = word not in ("smoothed", "anchored")
            return i + 1
        return self.selector(i, text)  # a metric name

    def run(self) -> str:
        i = 0
        while i < len(self.tokens):
            kind, text = self.tokens[i]
            if kind == "ident":
                i = self.identifier(i, text)
                continue
            if text == "{":
                i = self.selector(i, None)
                continue
            self.out.append(text)
            i += 1
            if kind == "space":
                continue
            self.aggregation = False
            if text == ")":
                if not self.closes:
                    raise ConfinementError("unbalanced ')' in the query")
                self.operand = self.closes.pop()
            elif text == "(":
                self.closes.append(False)
                self.operand = True
            elif text == "}":
                raise ConfinementError("unbalanced '}' in the query")
            else:  # numbers, strings and ranges end an operand; operators, "," and "@" want one
                self.operand = kind == "op"
        if self.closes:
            raise ConfinementError("unbalanced '(' in the query")
        return "".join(self.out)


def confine(query: str, namespace: str) -> str:
    """``query`` with ``namespace="<namespace>"`` in every vector selector (see the module's doc)."""
    _refuse_control_characters(query)
    return _Confiner(_tokens(query), namespace).run()
