"""Custom PromQL stays in its namespace: every selector gets the matcher, any other is refused."""

from __future__ import annotations

import pytest

from slipway.promql import ConfinementError, confine

NS = 'namespace="team-a"'


@pytest.mark.parametrize(
    ("query", "confined"),
    [
        ("up", f"up{{{NS}}}"),
        ('up{job="x"}', f'up{{job="x", {NS}}}'),
        ('up {job="x"}', f'up {{job="x", {NS}}}'),
        ("up{}", f"up{{{NS}}}"),
        ('up{namespace="team-a"}', 'up{namespace="team-a"}'),
        ('{__name__="up"}', f'{{__name__="up", {NS}}}'),
        ('{"my.metric", a="b"}', f'{{"my.metric", a="b", {NS}}}'),
        (
            'sum by (code) (rate(http_requests_total{track="canary"}[1m:10s])) / ignoring(code) group_left '
            "sum(rate(http_requests_total[5m] offset 1m))",
            f'sum by (code) (rate(http_requests_total{{track="canary", {NS}}}[1m:10s])) / ignoring(code) group_left '
            f"sum(rate(http_requests_total{{{NS}}}[5m] offset 1m))",
        ),
        (
            'histogram_quantile(0.95, sum(rate(lat_bucket{a=~"x|y"}[30s])) without (pod))',
            f'histogram_quantile(0.95, sum(rate(lat_bucket{{a=~"x|y", {NS}}}[30s])) without (pod))',
        ),
        ("sum without (instance) (up) > bool 0", f"sum without (instance) (up{{{NS}}}) > bool 0"),
        ("a and on(job) b or c unless d", f"a{{{NS}}} and on(job) b{{{NS}}} or c{{{NS}}} unless d{{{NS}}}"),
        ("job:rate5m:sum @ end()", f"job:rate5m:sum{{{NS}}} @ end()"),
        ("1 - (errors / requests)", f"1 - (errors{{{NS}}} / requests{{{NS}}})"),
        ('label_replace(up, "namespace", "x", "", "")', f'label_replace(up{{{NS}}}, "namespace", "x", "", "")'),
        ("vector(0) or Inf > NaN", "vector(0) or Inf > NaN"),
        # Keywords where Prometheus reads a metric name (issue 44, and what the fuzzer found before the fix).
        ("sum(or)", f"sum(or{{{NS}}})"),
        ("( And ) + -Unless", f"( And{{{NS}}} ) + -Unless{{{NS}}}"),
        ("a + on(x) or", f"a{{{NS}}} + on(x) or{{{NS}}}"),
        ("a + fill(0) or", f"a{{{NS}}} + fill(0) or{{{NS}}}"),
        ("offset offset 1h30m", f"offset{{{NS}}} offset 1h30m"),
        ("rate(by[5m]) @ start()", f"rate(by{{{NS}}}[5m]) @ start()"),
        ("sum by (x) (sum)", f"sum by (x) (sum{{{NS}}})"),
        ("SUM BY (job) (up)", f"SUM BY (job) (up{{{NS}}})"),
        ("x smoothed or fill", f"x{{{NS}}} smoothed or fill{{{NS}}}"),
        ("a * on(x) group_left (b) c", f"a{{{NS}}} * on(x) group_left (b) c{{{NS}}}"),
        (": == on(job) up", f":{{{NS}}} == on(job) up{{{NS}}}"),
        ("up offset step() > bool max_of(1m, 2m)", f"up{{{NS}}} offset step() > bool max_of(1m, 2m)"),
        # Comments never reach Prometheus.
        ("sum(up) # + count(kube_secret_info)\n", f"sum(up{{{NS}}}) \n"),
        ('up{job="a#b"} # }\n[5m # ]\n]', f'up{{job="a#b", {NS}}} \n[5m \n]'),
    ],
)
def test_every_selector_is_confined_to_the_namespace(query, confined):
    assert confine(query, "team-a") == confined


@pytest.mark.parametrize(
    "query",
    [
        'up{namespace="team-b"}',
        'up{namespace=~".*"}',
        'up{namespace!="team-a"}',
        'sum(rate(x{namespace=~"team-a|team-b"}[1m]))',
        '{"namespace"="kube-system"}',
        "up{",
        "rate(x[1m]",
        "up{job}",
        "up $ 1",
        # Issue 44: Prometheus ends a comment at "\r" too; no control character is sent.
        'sum(up) #\r+ count(kube_secret_info{namespace="kube-system", secret=~"a.*"})',
        "up\x0b+ x",
        "up\x00",
        "up\x85",
        'up{job="\r"}',
        "up\u00a0+ x",
        # Strings Prometheus would not read (the old code raised UnicodeDecodeError here).
        '{"names\\x#70ace"=".*"}',
        '{"namespace\\q"="x"}',
        '{"\\156amespace"="kube-system"}',
        # Ranges hold durations only; label lists label names only; info() reads other namespaces.
        'x[5m{a="b"}]',
        "x[foo]",
        "sum by (a {b}) (x)",
        "info(up)",
    ],
)
def test_a_query_that_reads_elsewhere_or_cannot_be_read_is_refused(query):
    with pytest.raises(ConfinementError):
        confine(query, "team-a")


def test_a_refusal_names_what_it_refused():
    with pytest.raises(ConfinementError, match=r"control character '\\r' at 9: write it with spaces"):
        confine("sum(up) #\r+ count(kube_secret_info)", "team-a")
    with pytest.raises(ConfinementError, match=r"info\(\) joins info series .* from every namespace"):
        confine("info(up)", "team-a")
