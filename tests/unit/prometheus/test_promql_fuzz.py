"""Confinement fuzzed against Prometheus' own parser: whatever a tenant writes, every selector that
Prometheus reads in what Slipway sends has namespace="<ns>", or Prometheus refuses the query.

hypothesis writes queries the way an attacker would (comments ended by "\\r", control characters,
keywords as metric names, unicode, subqueries, @ and offset, binary operators with their
modifiers, label_replace, info(), strings holding braces and quotes, characters spliced in
anywhere) with a fixed seed; `confine` reads each, and every query it does not refuse is parsed,
in one batch, by `.cache/promqlparse/promqlparse` (`make promql-oracle`: Prometheus 3.16's parser,
tests/tools/promqlparse), with the options of a Prometheus started without feature flags and
again with its experimental functions, fill modifiers and unquoted UTF-8 names on.
"""

from __future__ import annotations

import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from slipway.promql import ConfinementError, confine
from slipway_testing import promql_escapes, promql_parse, require_promql_oracle

NS = "team-a"
CASES = 3000

KEYWORDS = ["and", "or", "unless", "atan2", "sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk",
            "bottomk", "count_values", "quantile", "limitk", "limit_ratio", "offset", "smoothed", "anchored", "by",
            "without", "on", "ignoring", "group_left", "group_right", "fill", "fill_left", "fill_right", "bool",
            "start", "end", "step", "range", "max_of", "min_of", "inf", "nan", "info"]  # fmt: skip
CASED = st.sampled_from(KEYWORDS).flatmap(lambda w: st.sampled_from([w, w.upper(), w.title()]))
NAMES = st.sampled_from(["up", "kube_secret_info", "http_requests_total", "a:b", ":", "_x", "job:rate:sum"]) | CASED
# Mostly a space; else what Prometheus reads as space (\r), comments (ended by \n or \r) and what it never reads.
SEPARATORS = st.sampled_from([" "] * 80 + ["", "\t", "\n", "\r", "\r\n", " # c\n", "#x\r", "#", "# }\n", "\x0b",
                              "\x0c", "\x00", "\x85", "\u00a0", "\u2028", "\u3000", "\ufeff"])  # fmt: skip
STRINGS = st.sampled_from(['"x"', "'y'", "`z`", '"a}b"', '"{"', '"#"', '"\\""', "'\\''", '"\\x6eamespace"', "`a\nb`",
                           '"kube-system"', '"team-a"', '"é"', '"\\u00e9"', '"a\\\\"', "'\"'", '"\\q"'])  # fmt: skip
LABELS = st.sampled_from(["job", "namespace", '"namespace"', "'namespace'", '"names\\x70ace"', "`namespace`",
                          '"namespace\\u0000"', "__name__", '"a.b"', "NAMESPACE", "or", "by", "a:b",
                          '"\\156amespace"'])  # fmt: skip
VALUES = st.sampled_from(['"team-a"', '"kube-system"', '".*"', '"team-a|kube-system"', "'team-a'", '"team-\\x61"',
                          '"a}"', "`team-a`", '"team-a\\n"'])  # fmt: skip
OPS = st.sampled_from(["=", "!=", "=~", "!~", "==", "= ~"])
MATCHER = st.tuples(LABELS, OPS, VALUES).map("".join) | st.sampled_from(['"metric.name"', '"up"', "'or'"])
BRACES = st.lists(MATCHER, max_size=3).map(lambda ms: "{" + ", ".join(ms) + "}")
SELECTOR = st.tuples(NAMES, st.sampled_from(["", " "]), BRACES).map("".join) | NAMES | BRACES
NUMBERS = st.sampled_from(["1", "0.5", "1e3", "0x1f", "Inf", "-NaN", "5m", "1h30m", ".5"])
ATOMS = SELECTOR | NUMBERS | STRINGS
DURATIONS = st.sampled_from(["5m", "1m:10s", "5m:", "1h", "step()", "5m # x\n", "1m+1m", "range():1m", "x",
                             '5m{a="b"}'])  # fmt: skip
BINARY = st.sampled_from(["+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless",
                          "atan2", "OR", "</", ">/"])  # fmt: skip
MODIFIERS = st.sampled_from(["", "", "bool ", "on(job) ", "ignoring(a, b) ", "on(x) group_left ",
                             "on(x) group_left(y) ", "ignoring() group_right (z) ", "fill(0) ",
                             "on(x) fill_left(1) fill_right(-2) ", "group_left ", "on ", "bool on(job) "])  # fmt: skip
FUNCTIONS = st.sampled_from(["rate", "abs", "label_replace", "histogram_quantile", "info", "absent", "vector", "max_of",
                             "step", "end", "fill", "sum", "topk", "count_values", "OR", "unknown"])  # fmt: skip
GROUPING = st.sampled_from(
    ["by (job)", "without (a, b)", "BY ()", 'by ("a.b")', "by (or)", "without(x,)", "by (a {b})"]
)


def _expressions(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    s = SEPARATORS
    return st.one_of(
        st.tuples(children, s, BINARY, s, MODIFIERS, children).map(lambda t: "".join(t)),
        st.tuples(st.just("("), s, children, s, st.just(")")).map("".join),
        st.tuples(FUNCTIONS, s, st.lists(children | STRINGS, max_size=3).map(", ".join)).map(
            lambda t: f"{t[0]}{t[1]}({t[2]})"
        ),
        st.tuples(st.sampled_from(["sum", "max", "topk", "count", "SUM", "group"]), s, GROUPING, s, children).map(
            lambda t: f"{t[0]}{t[1]}{t[2]}{t[3]}({t[4]})"
        ),
        st.tuples(st.sampled_from(["sum", "avg", "quantile"]), children, s, GROUPING).map(
            lambda t: f"{t[0]}({t[1]}){t[2]}{t[3]}"
        ),
        st.tuples(children, s, DURATIONS).map(lambda t: f"{t[0]}{t[1]}[{t[2]}]"),
        st.tuples(
            children, s, st.sampled_from(["offset 5m", "offset -1m", "OFFSET step()", "offset (1m)", "offset or"])
        ).map(" ".join),
        st.tuples(children, s, st.sampled_from(["@ 100", "@ start()", "@ end()", "@ -1", "@ or"])).map(" ".join),
        st.tuples(children, st.sampled_from([" smoothed", " anchored", " bool", " by (x)"])).map("".join),
        st.tuples(st.sampled_from(["-", "+"]), children).map("".join),
    )


SPLICES = ["#", "\r", "\n", "{", "}", "(", ")", "[", "]", ",", '"', "'", "`", "\\", " or ", " offset ", "@", ":", "-",
           "sum", "by ", "x", "\x00", "é", " bool ", "\x1b", "\u2028"]  # fmt: skip


EXPRESSIONS = st.recursive(ATOMS, _expressions, max_leaves=6)
SPLICE = st.tuples(st.floats(0, 1), st.sampled_from(SPLICES))


@st.composite
def queries(draw: st.DrawFn) -> str:
    query = draw(EXPRESSIONS)
    for where, text in draw(st.lists(SPLICE, max_size=2)):  # characters spliced in anywhere
        at = int(where * len(query))
        query = query[:at] + text + query[at:]
    return query


def escapes(answer: dict, namespace: str = NS) -> list[str]:
    return promql_escapes(answer, namespace)


ISSUE_44 = 'sum(up) #\r+ count(kube_secret_info{namespace="kube-system", secret=~"a.*"})'


def test_every_selector_prometheus_reads_in_a_confined_query_is_in_the_namespace():
    require_promql_oracle()
    started = time.monotonic()
    sent: list[tuple[str, str]] = []
    refused: list[str] = []

    @settings(max_examples=CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(queries())
    @example(ISSUE_44)
    @example("sum(or)")
    @example("a + on(x) or")
    @example("a + fill(0) or")
    def read(query: str) -> None:
        try:
            sent.append((query, confine(query, NS)))
        except ConfinementError:
            refused.append(query)

    read()
    answers = promql_parse([confined for _, confined in sent] + [query for query, _ in sent])
    confined, raw = answers[: len(sent)], answers[len(sent) :]
    found = [(query, text, escapes(a)) for (query, text), a in zip(sent, confined, strict=True) if escapes(a)]
    assert not found, f"{len(found)} confined queries read outside {NS}, the first: {found[:3]}"
    # The generator gives Prometheus real work: many queries parse, and many read outside unconfined.
    parsed = sum("error" not in a["default"] for a in confined)
    assert parsed >= CASES // 5, f"only {parsed} of {len(sent)} confined queries parse; the generator drifted"
    assert sum(bool(escapes(a)) for a in raw) >= CASES // 10
    print(f"{len(sent) + len(refused)} queries: {len(refused)} refused, {len(sent)} sent, {parsed} parsed by "
          f"Prometheus, 0 read outside {NS}; {time.monotonic() - started:.1f} s")  # fmt: skip


def test_queries_a_team_writes_still_parse_once_confined():
    queries = [
        'sum by (code) (rate(http_requests_total{track="canary"}[1m:10s])) / ignoring(code) group_left '
        "sum(rate(http_requests_total[5m] offset 1m))",
        'histogram_quantile(0.95, sum(rate(lat_bucket{a=~"x|y"}[30s])) without (pod))',
        "sum without (instance) (up) > bool 0",
        "a and on(job) b or c unless d",
        "job:rate5m:sum @ end()",
        'label_replace(up, "dst", "$1", "src", "(.*)")',
        '{"my.metric", "my.label"="b"}',
        "SUM BY (job) (rate(up[5m] # the rate\n))",
        "max_over_time(sum(rate(x[1m]))[10m:1m]) - quantile(0.5, x offset -5m)",
        'topk(3, count_values("v", build_info)) * on() group_right vector(1)',
    ]
    answers = promql_parse([confine(q, NS) for q in queries])
    assert [a["default"].get("error") for a in answers] == [None] * len(queries)
    assert not [escapes(a) for a in answers if escapes(a)]


def test_the_gateway_presets_queries_parse_and_read_only_the_gateways_own_series():
    from slipway.inference.model import AnalysisMetric
    from slipway.inference.providers.gateway_queries import GATEWAY_METRICS, GATEWAYS, gateway_query

    own = 'job="traefik",namespace="traefik"'
    cases = [(name, gateway, AnalysisMetric(name=metric, max=1), track) for name, gateway in GATEWAYS.items()
             for metric in GATEWAY_METRICS for track in ("canary", "stable")]  # fmt: skip
    sent = [(name, gateway_query(metric, gateway, NS, "digits.v2", track, "30s", own))
            for name, gateway, metric, track in cases]  # fmt: skip
    answers = promql_parse([query for _, query in sent])
    required = {"traefik": [("job", "=", "traefik"), ("namespace", "=", "traefik")],
                "istio": [("namespace", "=", NS), ("reporter", "=", "destination"),
                          ("destination_service_namespace", "=", NS)]}  # fmt: skip
    selectors = 0
    for (name, query), answer in zip(sent, answers, strict=True):
        assert "error" not in answer["default"], (query, answer)
        for selector in answer["default"]["selectors"]:
            matchers = [(m["name"], m["type"], m["value"]) for m in selector]
            assert all(m in matchers for m in required[name]), (query, selector)
            selectors += 1
    assert selectors >= 2 * len(sent)
