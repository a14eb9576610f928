"""Prometheus' HTTP API over httpx: instant queries, and the canary analysis that asks them.

The only module that talks to Prometheus; :mod:`slipway.analysis` builds the queries and judges
the answers without I/O. Every query sent counts in
``slipway_external_requests_total{service="prometheus"}``.

A spec may name its own Prometheus only if the operator allows that address
(:func:`address_refusal`, ``--allowed-prometheus-urls``), and nothing a server answers is ever
repeated in a message: an error says the HTTP status and a fixed phrase (Prometheus'
``errorType`` is a fixed vocabulary; its ``error`` text is not), so a spec cannot make the
operator read an internal service and echo it into status, conditions or Events.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import httpx

from slipway import analysis, metrics
from slipway.config import OperatorConfig
from slipway.models.inferencedeployment import PROMETHEUS_ADDRESS_PATTERN, Analysis, AnalysisMetric
from slipway.redact import redact_url, transport_failure

ADDRESS_FIELD = "spec.rollout.analysis.prometheus.address"
QUERY_PATH = "/api/v1/query"
MAX_ANSWER_BYTES = 8 * 2**20  # an instant query the analysis can use answers a few series
# Prometheus' errorType values (web/api/v1): the only words of an error answer a message repeats.
ERROR_TYPES = ("bad_data", "execution", "timeout", "canceled", "internal", "unavailable", "not_found", "not_acceptable")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}")


class PrometheusError(Exception):
    """Prometheus answered, but refused the query (e.g. bad PromQL)."""


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not be reached or answered 5xx; a retry may succeed."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


class PrometheusClient:
    """A small client of ``/api/v1/query``; it follows no redirect."""

    def __init__(self, base_url: str, timeout: float = 10.0, http: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)  # how messages name it
        self.timeout = timeout  # per network operation, and twice that for a whole answer
        self._http = http or httpx.Client(timeout=timeout, follow_redirects=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_url!r})"

    def query(self, promql: str) -> list[Sample]:
        """Evaluate an instant query; NaN samples (e.g. 0/0 rates) are dropped as no data."""
        with metrics.external_request("prometheus"):
            return self._query(promql)

    def _query(self, promql: str) -> list[Sample]:
        where = f"Prometheus at {self.shown_url}"
        try:
            # timeout: Prometheus itself stops evaluating a query past it (its own time, not just ours).
            params = {"query": promql, "timeout": f"{self.timeout:g}s"}
            with self._http.stream("GET", f"{self.base_url}{QUERY_PATH}", params=params) as resp:
                status, content_type = resp.status_code, resp.headers.get("content-type", "")
                content = self._read(resp, where)
        except httpx.HTTPError as exc:
            raise PrometheusUnavailable(f"{where} unreachable: {transport_failure(exc)}") from None
        body = _json_object(content) if content_type.startswith("application/json") else {}
        error_type = body.get("errorType") if body.get("status") == "error" else None
        said = f" {error_type}" if error_type in ERROR_TYPES else ""
        if status >= 500 or status == 429:
            raise PrometheusUnavailable(f"{where} answered {status}{said} to {QUERY_PATH}")
        if body.get("status") == "error" and 400 <= status < 500:
            raise PrometheusError(
                f"{where} refused the query ({status}{said}); paste it (status.analysis[].query) "
                "into the Prometheus UI to see why"
            )
        if status != 200 or body.get("status") != "success":
            raise PrometheusError(f"{where} answered {status} to {QUERY_PATH} {_not_an_answer(status)}")
        return [s for s in _samples(body, where) if not math.isnan(s.value)]

    def _read(self, resp: httpx.Response, where: str) -> bytes:
        """The answer's bytes: at most ``MAX_ANSWER_BYTES``, within twice the timeout."""
        deadline = time.monotonic() + 2 * self.timeout
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise PrometheusError(
                    f"{where} answered more than {MAX_ANSWER_BYTES // 2**20} MiB to {QUERY_PATH}; aggregate the query"
                )
            if time.monotonic() > deadline:
                raise PrometheusUnavailable(f"{where} did not finish its answer in {2 * self.timeout:g}s")
            chunks.append(chunk)
        return b"".join(chunks)

    def query_value(self, promql: str) -> float | None:
        """The single value of an instant query, or None when it has no data.

        A query that answers several series is refused: an analysis compares one number per
        track, so the query must aggregate (e.g. ``sum(...)``).
        """
        samples = self.query(promql)
        if len(samples) > 1:
            raise PrometheusError(
                f"the query answered {len(samples)} series{_differing_labels(samples)}; "
                "aggregate it to one, e.g. sum(...)"
            )
        return samples[0].value if samples else None

    def close(self) -> None:
        self._http.close()


def _json_object(content: bytes) -> dict[str, object]:
    """The answer's JSON object, or {} when it is anything else (its text is never looked at again)."""
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return {}
    return body if isinstance(body, dict) else {}


def _not_an_answer(status: int) -> str:
    """Why an answer that is not Prometheus' JSON came, as far as its status says."""
    if 300 <= status < 400:
        return "(a redirect, which the operator does not follow: give the address it points at)"
    if status in (401, 403):
        return "(it wants credentials, which the operator does not send)"
    return "without Prometheus' JSON (not a Prometheus API?)"


def _samples(body: Mapping[str, object], where: str) -> list[Sample]:
    """The samples of a successful instant query; PrometheusError when it is not one."""
    data = body.get("data")
    kind = data.get("resultType") if isinstance(data, dict) else None
    if kind == "matrix":
        raise PrometheusError("the query returns a range vector (such as x[5m]); wrap it in rate(...) or similar")
    if kind == "string":
        raise PrometheusError("the query returns a string, not a number")
    try:
        if kind == "scalar" and isinstance(data, dict):
            return [Sample({}, float(data["result"][1]))]
        if kind == "vector" and isinstance(data, dict):
            return [Sample(_labels(r["metric"]), float(r["value"][1])) for r in data["result"]]
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        pass
    raise PrometheusError(f"{where} answered {QUERY_PATH} with something that is not a query result")


def _labels(metric: Mapping[object, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in metric.items()}


def _differing_labels(samples: list[Sample]) -> str:
    """`` (they differ by pod, instance)``: the label names (never values) that tell series apart."""
    names = sorted({k for s in samples for k in s.labels if len({str(t.labels.get(k)) for t in samples}) > 1})
    shown = [n for n in names if _LABEL_NAME.fullmatch(n)][:5]
    return f" (they differ by {', '.join(shown)})" if shown else ""


def address_refusal(address: str, config: OperatorConfig) -> str | None:
    """Why the operator will not query ``address`` (``spec.rollout.analysis.prometheus.address``),
    or None when it is one of ``config.allowed_prometheus_urls``.

    Addresses compare by scheme, host, port (the scheme's default if none) and path without its
    trailing slash; a spec's address must be plain: no user info, query or fragment.
    """
    shown = redact_url(address)
    if not re.fullmatch(PROMETHEUS_ADDRESS_PATTERN, address):
        return (
            f"{ADDRESS_FIELD} {shown!r} is not a plain http(s) URL (scheme, host, optional port and path; "
            "no credentials, query or fragment); leave the field out to use the operator's Prometheus"
        )
    key = _address_key(address)
    if key is not None and key in {_address_key(url) for url in config.allowed_prometheus_urls}:
        return None
    fallback = (
        "leave the field out to use the operator's Prometheus"
        if config.prometheus_url
        else "give the operator a --prometheus-url and leave the field out"
    )
    return (
        f"{ADDRESS_FIELD} {shown!r} is not a Prometheus the operator may query; "
        f"add it to the operator's --allowed-prometheus-urls, or {fallback}"
    )


def _address_key(url: str) -> tuple[str, str, int, str] | None:
    """(scheme, host, port, path) as the HTTP client will use them, or None if ``url`` is no http(s) URL."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, parsed.host.rstrip(".").lower(), port, parsed.path.rstrip("/")


class PrometheusProvider:
    """The analysis provider (:class:`slipway.analysis.Provider`) of one Prometheus: a metric's
    PromQL for one track (built-in per preset, or the user's query with its placeholders filled),
    narrowed to the track's revision, else its model version. Once Prometheus is found
    unreachable, it asks no more."""

    def __init__(
        self,
        client: PrometheusClient,
        settings: Analysis,
        namespace: str,
        deployment: str,
        versions: Mapping[str, str] | None = None,
        revisions: Mapping[str, str] | None = None,
    ) -> None:
        self.client, self.settings = client, settings
        self.namespace, self.deployment = namespace, deployment
        self.versions, self.revisions = versions or {}, revisions or {}
        self.window = analysis.analysis_window(settings.interval)
        self.unavailable: str | None = None

    def measure(self, metric: AnalysisMetric, track: str) -> analysis.Measurement:
        try:
            query = analysis.resolve_query(metric, self.settings.preset, track, self.namespace, self.deployment,
                                           self.window, self.versions.get(track),
                                           self.revisions.get(track))  # fmt: skip
        except analysis.QueryError as exc:
            return analysis.Measurement(metric.query or "", error=str(exc))
        if self.unavailable is not None:
            return analysis.Measurement(query, error=self.unavailable)
        try:
            return analysis.Measurement(query, value=self.client.query_value(query))
        except PrometheusUnavailable as exc:
            self.unavailable = f"{exc} (monitoring down: the step waits, it neither promotes nor rolls back)"
            return analysis.Measurement(query, error=self.unavailable)
        except PrometheusError as exc:
            return analysis.Measurement(query, error=f"{exc}; fix the metric's query in spec.rollout.analysis.metrics")


def run_analysis(
    client: PrometheusClient,
    settings: Analysis,
    namespace: str,
    deployment: str,
    now: datetime | str,
    versions: Mapping[str, str] | None = None,
    revisions: Mapping[str, str] | None = None,
    subject: str = analysis.CANARY_TRACK,
    pricing: analysis.Pricing | None = None,
) -> analysis.AnalysisOutcome:
    """Query the canary (and the stable where a metric compares with it) and judge every metric.
    ``subject`` STABLE_TRACK judges the stable's pods alone (a bake: absolute thresholds only).

    ``settings`` is ``spec.rollout.analysis``; ``revisions`` (track -> revision) narrows each track
    to the pods of that revision, else ``versions`` (track -> model version) to that version.
    ``pricing``: each track's price per hour, for the cost metrics and each track's serving cost.
    """
    metric_rules = list(settings.metrics) or list(analysis.DEFAULT_METRICS)
    plain = pricing or analysis.Pricing({}, {})
    deciding, dry = (analysis.Priced(PrometheusProvider(client, settings, namespace, deployment, versions, revisions),
                                     plain.per_hour, plain.missing) for _ in range(2))  # fmt: skip
    outcome = analysis.judge(metric_rules, deciding, dry, settings.no_data, now, subject)
    if pricing is None or deciding.unavailable is not None:
        return outcome
    tracks = [subject] + [t for t in (versions or {}) if t != subject and subject == analysis.CANARY_TRACK]
    costs = {t: analysis.serving_cost(deciding.inner, pricing, t, now) for t in tracks}
    return dataclasses.replace(outcome, costs=costs)


NO_PROMETHEUS = "no Prometheus: set spec.rollout.analysis.prometheus.address or the operator's --prometheus-url"


def analyse_canary(
    default: PrometheusClient | None,
    settings: Analysis,
    namespace: str,
    deployment: str,
    now: datetime,
    versions: Mapping[str, str],
    timeout: float,
    *,
    config: OperatorConfig | None = None,
    revisions: Mapping[str, str] | None = None,
    subject: str = analysis.CANARY_TRACK,
    pricing: analysis.Pricing | None = None,
) -> analysis.AnalysisOutcome:
    """:func:`run_analysis` against the spec's Prometheus (``analysis.prometheus.address``) or the
    operator's default; Inconclusive, naming the fix, when there is neither, or when ``config``
    is given and does not allow the spec's address (:func:`address_refusal`)."""
    address = settings.prometheus.address if settings.prometheus else None
    refusal = address_refusal(address, config) if address is not None and config is not None else None
    if refusal is not None:
        return analysis.not_measured(settings.metrics, now, refusal)
    client = PrometheusClient(address, timeout=timeout) if address is not None else default
    if client is None:
        return analysis.not_measured(settings.metrics, now, NO_PROMETHEUS)
    try:
        return run_analysis(client, settings, namespace, deployment, now, versions, revisions, subject, pricing)
    finally:
        if client is not default:
            client.close()
