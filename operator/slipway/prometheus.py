"""Prometheus' HTTP API over httpx: instant queries, and the canary analysis that asks them.

The only module that talks to Prometheus: the analysis' Prometheus source
(:mod:`slipway.inference.providers.prometheus`) and OpenCost's prices (:mod:`slipway.opencost`) ask through
it. Every query sent counts in ``slipway_external_requests_total{service="prometheus"}``.

A spec may name its own Prometheus only if the operator allows that address
(:func:`address_refusal`, ``--allowed-prometheus-urls``), and nothing a server answers is ever
repeated in a message: an error says the HTTP status and a fixed phrase (Prometheus'
``errorType`` is a fixed vocabulary; its ``error`` text is not), so a spec cannot make the
operator read an internal service and echo it into status, conditions or Events.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from slipway import metrics
from slipway.config import OperatorConfig
from slipway.models.base import PROMETHEUS_ADDRESS_PATTERN
from slipway.redact import redact_url, transport_failure
from slipway.tls import TlsContext, TlsOptions, failure, setting_names

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
    """A small client of ``/api/v1/query``; it follows no redirect. ``tls``: the CA bundle, client
    certificate or insecure switch of an https address (``--prometheus-ca-bundle``, ...)."""

    def __init__(
        self, base_url: str, timeout: float = 10.0, http: httpx.Client | None = None, tls: TlsOptions | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)  # how messages name it
        self.timeout = timeout  # per network operation, and twice that for a whole answer
        self.tls = tls if tls is not None else TlsOptions(names=setting_names("prometheus"))  # named in errors
        https = self.base_url.lower().startswith("https://")
        self._tls = TlsContext(self.tls) if http is None and self.tls.configured and https else None
        verify = self._tls.ssl if self._tls is not None else True
        self._http = http or httpx.Client(timeout=timeout, follow_redirects=False, verify=verify)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_url!r})"

    def query(self, promql: str) -> list[Sample]:
        """Evaluate an instant query; NaN samples (e.g. 0/0 rates) are dropped as no data."""
        with metrics.external_request("prometheus"):
            return self._query(promql)

    def _query(self, promql: str) -> list[Sample]:
        where = f"Prometheus at {self.shown_url}"
        if self._tls is not None:
            self._tls.refresh()
        try:
            # timeout: Prometheus itself stops evaluating a query past it (its own time, not just ours).
            params = {"query": promql, "timeout": f"{self.timeout:g}s"}
            with self._http.stream("GET", f"{self.base_url}{QUERY_PATH}", params=params) as resp:
                status, content_type = resp.status_code, resp.headers.get("content-type", "")
                content = self._read(resp, where)
        except httpx.HTTPError as exc:
            raise PrometheusUnavailable(
                f"{where} unreachable: {failure(exc, self.tls) or transport_failure(exc)}"
            ) from None
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
