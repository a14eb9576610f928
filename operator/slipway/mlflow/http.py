"""The HTTP layer every MLflow call goes through: one connection pool, auth, retries, and
bounds; a failed answer raises one of the exceptions of :mod:`slipway.mlflow.errors`, whose
messages never repeat what a server answered. The server's address is written with its
credentials redacted.

Authentication comes from the environment, as in MLflow's own client:
``MLFLOW_TRACKING_TOKEN`` (bearer) or ``MLFLOW_TRACKING_USERNAME`` and
``MLFLOW_TRACKING_PASSWORD`` (basic). Secret values are never logged or shown in ``repr``. TLS
(:mod:`slipway.tls`): the operator's settings, or in pods MLflow's own ``MLFLOW_TRACKING_SERVER_CERT_PATH``,
``MLFLOW_TRACKING_CLIENT_CERT_PATH`` and ``MLFLOW_TRACKING_INSECURE_TLS``.

Every request sent (each retry too) counts in ``slipway_external_requests_total{service="mlflow"}``.

Bounds, whatever a server (or a tenant's trainer writing to it) does: an answer is read to at most
:data:`MAX_ANSWER_BYTES` (:class:`MlflowAnswerTooLarge` past it), a paginated answer to at most
:data:`MAX_PAGES` pages and never past a page token seen before. Given ``lease_left`` (the leader's
time before its renew deadline, :meth:`slipway.leader.LeaderElector.time_left`), a write starts
only while that time is left and ends within it (:class:`LeaseDeadlinePassed` otherwise).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Self

import httpx

from slipway import metrics
from slipway.mlflow import bounds
from slipway.mlflow.errors import (
    LeaseDeadlinePassed,
    MlflowAnswerTooLarge,
    MlflowError,
    MlflowUnavailable,
    raise_for_answer,
)
from slipway.redact import redact_url, transport_failure
from slipway.tls import MLFLOW_ENV_NAMES, TlsContext, TlsOptions, failure, insecure_warning

log = logging.getLogger(__name__)

API = "/api/2.0"
# A run with 50,000 metric keys, a page of 1,000 model versions or 25,000 metric samples fits; a run
# parsed from it holds about 3 times as much, once per pass reading it (12 at a time by default).
MAX_ANSWER_BYTES = 4 * 2**20
MAX_PAGES = 100  # of a paginated answer: 100,000 runs or versions, 2.5 million metric samples
_ENCODING_HEADERS = ("content-encoding", "content-length", "transfer-encoding")  # of the bytes as sent
_RETRY_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0)


def retries_within(seconds: float) -> int:
    """How many retries of the back-off (0.5, 1, 2, 4, then 8 s apart) fit in ``seconds``."""
    retries, waited = 0, 0.0
    while True:
        delay = _RETRY_BACKOFF_SECONDS[min(retries, len(_RETRY_BACKOFF_SECONDS) - 1)]
        if waited + delay > seconds:
            return retries
        waited += delay
        retries += 1


# The request fields that say what was asked for (never values of tags or params).
_SUBJECT_FIELDS = ("experiment_id", "experiment_name", "run_id", "name", "version", "alias", "key")


def _auth_from_env() -> httpx.Auth | None:
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return _BearerAuth(token)
    username = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if username and password:
        return httpx.BasicAuth(username, password)
    return None


def _tls_from_env() -> TlsOptions:
    """MLflow's TLS variables: a CA bundle, one PEM file of the client certificate and its key, insecure."""
    insecure = os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").strip().lower() in ("true", "1")
    return TlsOptions(
        os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None,
        os.environ.get("MLFLOW_TRACKING_CLIENT_CERT_PATH") or None,
        insecure=insecure,
        names=MLFLOW_ENV_NAMES,
    )


class _BearerAuth(httpx.Auth):
    def __init__(self, token: str) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request

    def __repr__(self) -> str:
        return "_BearerAuth(<redacted>)"


class MlflowHttp:
    """The connection to one MLflow tracking server, which the tracking, registry and artifact
    parts of :class:`slipway.mlflow.MlflowClient` share.

    ``retries`` applies only to idempotent requests answered with :class:`MlflowUnavailable`;
    keep it 0 inside operator handlers (kopf retries with backoff) and raise it in workloads.
    """

    def __init__(
        self,
        tracking_uri: str,
        *,
        timeout: float = 10.0,
        retries: int = 0,
        auth: httpx.Auth | None = None,
        transport: httpx.BaseTransport | None = None,
        lease_left: Callable[[], float] | None = None,
        tls: TlsOptions | None = None,
    ) -> None:
        parsed = urllib.parse.urlparse(tracking_uri)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(
                f"MLflow tracking URI {redact_url(tracking_uri)!r} is not an http(s) URL; "
                "set MLFLOW_TRACKING_URI to the tracking server, e.g. http://mlflow.mlflow:5000"
            )
        self.tracking_uri = tracking_uri.rstrip("/")
        self.shown_uri = redact_url(self.tracking_uri)  # how messages and logs name the server
        self.retries = retries
        self.timeout = timeout
        # Seconds before this replica's renew deadline (None: it writes at any time, e.g. --standalone).
        self.lease_left = lease_left
        # A CA bundle, a client certificate or no check (https only; a ValueError names a bad file's option).
        self.tls = tls
        self._tls = TlsContext(tls) if tls is not None and tls.configured and parsed.scheme == "https" else None
        self._http = httpx.Client(
            base_url=self.tracking_uri,
            timeout=timeout,
            auth=auth if auth is not None else _auth_from_env(),
            transport=transport,
            headers={"User-Agent": "slipway"},
            verify=self._tls.ssl if self._tls is not None else True,
        )

    @classmethod
    def from_env(cls, tracking_uri: str | None = None, **kwargs: Any) -> Self:
        """A client for ``tracking_uri`` or ``$MLFLOW_TRACKING_URI``, with auth and TLS from the env, as
        MLflow's own client reads them (``MLFLOW_TRACKING_SERVER_CERT_PATH``, ...)."""
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise ValueError("MLFLOW_TRACKING_URI is not set: point it at the MLflow tracking server")
        kwargs.setdefault("tls", _tls_from_env())
        if kwargs["tls"].insecure:
            log.warning(insecure_warning("MLflow", kwargs["tls"]))
        return cls(uri, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_uri!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
        writes: bool | None = None,
    ) -> dict[str, Any]:
        """One request to ``/api/2.0<path>``; returns the decoded JSON answer. ``writes`` (default:
        any method but GET) says whether it changes anything, bounded by the lease if so."""
        return self._call_raw(method, API + path, params=params, json=json, idempotent=idempotent, writes=writes)

    def _pages(
        self, method: str, path: str, request: Mapping[str, Any], items: str, *, idempotent: bool | None = None
    ) -> Iterator[Any]:
        """The ``items`` of each page of a paginated answer, asking for the next page (following
        ``next_page_token``) only when the caller wants more: at most :data:`MAX_PAGES` pages, and
        never a token answered before (a server paging in a circle is an :class:`MlflowError`)."""
        page_token, seen, what = "", set(), f"{method} {API}{path}{_subject(request)}"
        for number in range(1, MAX_PAGES + 1):
            page = {**request, "page_token": page_token} if page_token else request
            as_body = {"params": page} if method == "GET" else {"json": page}
            answer = self._call(method, path, **as_body, idempotent=idempotent, writes=False)
            yield from answer.get(items, [])
            page_token = answer.get("next_page_token", "")
            if not page_token:
                return
            token = hashlib.sha256(str(page_token).encode()).digest()
            if token in seen:
                raise MlflowError(bounds.paging_loop(what, number), error_code="PAGING_LOOP")
            seen.add(token)
        raise MlflowError(bounds.too_many_pages(what, MAX_PAGES), error_code="TOO_MANY_PAGES")

    def _call_raw(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
        writes: bool | None = None,
    ) -> dict[str, Any]:
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE")
        what = f"{method} {url}{_subject(params or json or {})}"
        response = self._send(
            lambda until: self._bounded(method, url, params, json, what, until),
            what,
            idempotent=idempotent,
            writes=method != "GET" if writes is None else writes,
        )
        if not response.content:
            return {}
        try:
            answer = response.json()
        except (ValueError, RecursionError):
            # Retried as an outage (a proxy's error page, a garbled answer), with the likelier lasting cause named.
            raise MlflowUnavailable(
                f"MLflow {what} answered {_kind_of_content(response)}, not JSON; "
                "is MLFLOW_TRACKING_URI pointing at an MLflow server?",
                status=response.status_code,
            ) from None
        return answer if isinstance(answer, dict) else {}

    def _bounded(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None,
        json: Mapping[str, Any] | None,
        what: str,
        until: float | None = None,
    ) -> httpx.Response:
        """One exchange whose answer is read to at most :data:`MAX_ANSWER_BYTES` (a run with 300k
        metric keys must not take the operator's memory): more is an :class:`MlflowAnswerTooLarge`.
        ``until``: the ``time.monotonic()`` by which a write ends (:meth:`_write_window`)."""
        timeout = self.timeout if until is None else bounds.write_timeout(until - time.monotonic(), self.timeout)
        if self._tls is not None:
            self._tls.refresh()
        request = self._http.build_request(method, url, params=params, json=json, timeout=timeout)
        streamed = self._http.send(request, stream=True)
        try:
            chunks, size = [], 0
            for chunk in streamed.iter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise MlflowAnswerTooLarge(
                        f"MLflow {what} answered more than {MAX_ANSWER_BYTES // 2**20} MiB; Slipway reads no more"
                        f"{bounds.too_large_hint(url)}",
                        status=streamed.status_code,
                        error_code="ANSWER_TOO_LARGE",
                    )
                if until is not None and time.monotonic() > until:
                    raise LeaseDeadlinePassed(f"MLflow {what}: cut at this replica's lease deadline")
                chunks.append(chunk)
        finally:
            streamed.close()
        decoded = {k: v for k, v in streamed.headers.items() if k.lower() not in _ENCODING_HEADERS}
        return httpx.Response(streamed.status_code, headers=decoded, content=b"".join(chunks), request=request)

    def _send(
        self, request: Callable[[float | None], httpx.Response], what: str, *, idempotent: bool, writes: bool = False
    ) -> httpx.Response:
        """Run ``request(until)`` (one HTTP exchange, a write ending by ``until``), map failures,
        retry if allowed."""
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(attempts):
            until = self._write_window(what) if writes else None
            try:
                with metrics.external_request("mlflow"):
                    response = request(until)
                    raise_for_answer(response, what, self.shown_uri)
                return response
            except httpx.TimeoutException:
                error: MlflowUnavailable = MlflowUnavailable(
                    f"MLflow at {self.shown_uri} did not answer {what} in time"
                )
            except httpx.TransportError as exc:
                why = failure(exc, self.tls) or transport_failure(exc)
                error = MlflowUnavailable(f"MLflow at {self.shown_uri} is unreachable ({what}): {why}")
            except MlflowUnavailable as exc:
                error = exc
            if attempt + 1 < attempts:
                delay = _RETRY_BACKOFF_SECONDS[min(attempt, len(_RETRY_BACKOFF_SECONDS) - 1)]
                log.warning("%s; retrying in %.1fs (%d/%d)", error, delay, attempt + 1, attempts - 1)
                time.sleep(delay)
        raise error

    def _write_window(self, what: str) -> float | None:
        """The ``time.monotonic()`` by which a write must end: this replica's renew deadline, after
        which it stops leading and ``duration - renewDeadline`` seconds before a standby may lead
        (None without a lease). Past it the write is not sent: :class:`LeaseDeadlinePassed`."""
        if self.lease_left is None:
            return None
        now, left = time.monotonic(), self.lease_left()
        if left <= 0:
            raise LeaseDeadlinePassed(
                f"MLflow {what} not sent: this replica's Lease is past its renew deadline (or it does not "
                "lead); the leader sends it on its next pass"
            )
        return now + left


def _kind_of_content(response: httpx.Response) -> str:
    content_type = response.headers.get("content-type", "").lower()
    if content_type.startswith("text/html"):
        return "an HTML page"
    return "text" if content_type.startswith("text/") else "something"


def _subject(fields: Mapping[str, Any]) -> str:
    """`` (name='digits', alias='production')``: what a request asked for, from Slipway's own request."""
    shown = [f"{k}={str(fields[k])[:100]!r}" for k in _SUBJECT_FIELDS if isinstance(fields.get(k), str | int)]
    return f" ({', '.join(shown)})" if shown else ""
