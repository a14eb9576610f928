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
    ],
)
def test_a_query_that_reads_elsewhere_or_cannot_be_read_is_refused(query):
    with pytest.raises(ConfinementError):
        confine(query, "team-a")
