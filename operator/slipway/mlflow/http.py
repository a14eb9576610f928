"""The HTTP layer every MLflow call goes through: one connection pool, auth, retries, and
the mapping of MLflow's answers onto three exceptions:

- :class:`MlflowNotFound` — the object does not exist (``RESOURCE_DOES_NOT_EXIST``, and the
  ``INVALID_PARAMETER_VALUE`` that MLflow answers for a missing alias);
- :class:`MlflowUnavailable` — the server cannot be reached, timed out, answered 5xx or 429;
  a retry may succeed (the operator turns it into ``kopf.TemporaryError``);
- :class:`MlflowError` — anything else (bad request, permission denied, ...).

Authentication comes from the environment, as in MLflow's own client:
``MLFLOW_TRACKING_TOKEN`` (bearer) or ``MLFLOW_TRACKING_USERNAME`` and
``MLFLOW_TRACKING_PASSWORD`` (basic). Secret values are never logged or shown in ``repr``.

Every request sent (each retry too) counts in ``slipway_external_requests_total{service="mlflow"}``.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Self

import httpx

from slipway import metrics

log = logging.getLogger(__name__)

API = "/api/2.0"
_RETRY_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0)


class MlflowError(Exception):
    """An MLflow request failed; ``status`` is the HTTP status (None if no answer arrived)."""

    def __init__(self, message: str, *, status: int | None = None, error_code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_code = error_code

    def __str__(self) -> str:
        code = f" [{self.error_code}]" if self.error_code else ""
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.message}{code}{status}"


class MlflowNotFound(MlflowError):
    """The experiment, run, model, version, alias or artifact does not exist."""


class MlflowUnavailable(MlflowError):
    """MLflow could not answer now (connection error, timeout, 5xx, 429); retrying may help."""


def _auth_from_env() -> httpx.Auth | None:
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return _BearerAuth(token)
    username = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if username and password:
        return httpx.BasicAuth(username, password)
    return None


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
    ) -> None:
        parsed = urllib.parse.urlparse(tracking_uri)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(
                f"MLflow tracking URI {tracking_uri!r} is not an http(s) URL; "
                "set MLFLOW_TRACKING_URI to the tracking server, e.g. http://mlflow.mlflow:5000"
            )
        self.tracking_uri = tracking_uri.rstrip("/")
        self.retries = retries
        self._http = httpx.Client(
            base_url=self.tracking_uri,
            timeout=timeout,
            auth=auth if auth is not None else _auth_from_env(),
            transport=transport,
            headers={"User-Agent": "slipway"},
        )

    @classmethod
    def from_env(cls, tracking_uri: str | None = None, **kwargs: Any) -> Self:
        """A client for ``tracking_uri`` or ``$MLFLOW_TRACKING_URI``, with auth from the env."""
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise ValueError("MLFLOW_TRACKING_URI is not set: point it at the MLflow tracking server")
        return cls(uri, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tracking_uri!r})"

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
    ) -> dict[str, Any]:
        """One request to ``/api/2.0<path>``; returns the decoded JSON answer."""
        return self._call_raw(method, API + path, params=params, json=json, idempotent=idempotent)

    def _pages(
        self, method: str, path: str, request: Mapping[str, Any], items: str, *, idempotent: bool | None = None
    ) -> Iterator[Any]:
        """The ``items`` of each page of a paginated answer, asking for the next page (following
        ``next_page_token``) only when the caller wants more."""
        page_token = ""
        while True:
            page = {**request, "page_token": page_token} if page_token else request
            as_body = {"params": page} if method == "GET" else {"json": page}
            answer = self._call(method, path, **as_body, idempotent=idempotent)
            yield from answer.get(items, [])
            page_token = answer.get("next_page_token", "")
            if not page_token:
                return

    def _call_raw(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
    ) -> dict[str, Any]:
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE")
        response = self._send(
            lambda: self._http.request(method, url, params=params, json=json),
            f"{method} {url}",
            idempotent=idempotent,
        )
        if not response.content:
            return {}
        try:
            answer = response.json()
        except ValueError as exc:
            raise MlflowError(
                f"MLflow {method} {url} answered non-JSON ({response.headers.get('content-type')}); "
                "is MLFLOW_TRACKING_URI pointing at an MLflow server?",
                status=response.status_code,
            ) from exc
        return answer if isinstance(answer, dict) else {}

    def _send(self, request: Callable[[], httpx.Response], what: str, *, idempotent: bool) -> httpx.Response:
        """Run ``request`` (one HTTP exchange), map failures, retry if allowed."""
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(attempts):
            try:
                with metrics.external_request("mlflow"):
                    response = request()
                    _raise_for_answer(response, what, self.tracking_uri)
                return response
            except httpx.TimeoutException as exc:
                error: MlflowUnavailable = MlflowUnavailable(
                    f"MLflow at {self.tracking_uri} did not answer {what} in time: {exc}"
                )
            except httpx.TransportError as exc:
                error = MlflowUnavailable(f"MLflow at {self.tracking_uri} is unreachable ({what}): {exc}")
            except MlflowUnavailable as exc:
                error = exc
            if attempt + 1 < attempts:
                delay = _RETRY_BACKOFF_SECONDS[min(attempt, len(_RETRY_BACKOFF_SECONDS) - 1)]
                log.warning("%s; retrying in %.1fs (%d/%d)", error, delay, attempt + 1, attempts - 1)
                time.sleep(delay)
        raise error


def _raise_for_answer(response: httpx.Response, what: str, server: str) -> None:
    if response.is_success:
        return
    status = response.status_code
    error_code, message = "", response.text[:500]
    try:
        body = response.json()
        if isinstance(body, dict):
            error_code = str(body.get("error_code", ""))
            message = str(body.get("message", message))
    except ValueError:
        pass
    text = f"MLflow {what}: {message}"
    if status in (401, 403):
        text += " (check MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD)"
    if status >= 500 or status == 429:
        raise MlflowUnavailable(f"MLflow at {server} failed {what}: {message}", status=status, error_code=error_code)
    if status == 404 or error_code == "RESOURCE_DOES_NOT_EXIST":
        raise MlflowNotFound(text, status=status, error_code=error_code)
    if error_code == "INVALID_PARAMETER_VALUE" and "/registered-models/alias" in what and "not found" in message:
        # MLflow answers a missing alias with 400 INVALID_PARAMETER_VALUE, not 404.
        raise MlflowNotFound(text, status=status, error_code=error_code)
    raise MlflowError(text, status=status, error_code=error_code)
