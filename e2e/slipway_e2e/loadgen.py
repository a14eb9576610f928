"""A small load driver for tests and demos: predictions spread over a Service's endpoints.

It reads the Service's EndpointSlices (``discovery.k8s.io/v1``, label
``kubernetes.io/service-name``) every second and sends ``POST /v1/predict`` to the ready
endpoints in turn, as kube-proxy spreads connections over them; so in ``traffic.mode:
Replicas`` the canary gets its share of ready replicas, with no Service proxy on the machine.
Like kube-proxy it uses each endpoint's first address, and falls back to serving-but-terminating
endpoints only when none is ready.

    with LoadDriver.for_service(api, "team-a", "digits", rate=20, max_duration=120) as load:
        ...  # wait on something
    print(load.stats().by_code)

It runs in a background thread at a bounded rate, at most ``concurrency`` requests in flight
(a tick with all of them busy is skipped and counted, not queued), and stops by itself after
``max_duration`` seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from kubernetes import client

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
PREDICT_PATH = "/v1/predict"
REFRESH_SECONDS = 1.0
MAX_RATE = 500.0  # requests per second
MAX_CONCURRENCY = 512  # long streams: rate × duration in flight
MAX_DURATION_SECONDS = 3600.0

# The first image of scikit-learn's digits (a zero): 8x8 pixels, 0..16, as serve.py expects.
DIGIT_PIXELS: tuple[float, ...] = (
    0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0, 0, 3, 15, 2, 0, 11, 8, 0, 0, 4, 12, 0, 0, 8, 8, 0,
    0, 5, 8, 0, 0, 9, 8, 0, 0, 4, 11, 0, 1, 12, 7, 0, 0, 2, 14, 5, 10, 12, 0, 0, 0, 0, 6, 13, 10, 0, 0, 0,
)  # fmt: skip


@dataclass(frozen=True, order=True)
class Endpoint:
    """One address and port that serves the Service."""

    ip: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}"


def predict_payload(instances: int = 1) -> dict[str, list[list[float]]]:
    """A valid ``/v1/predict`` body of ``instances`` digit images."""
    return {"instances": [[float(p) for p in DIGIT_PIXELS] for _ in range(instances)]}


def _slice_port(endpoint_slice: Mapping[str, Any], port_name: str | None) -> int | None:
    for port in endpoint_slice.get("ports") or []:
        if port.get("port") is None or (port.get("protocol") or "TCP") != "TCP":
            continue
        if port_name is None or port.get("name") == port_name:
            return int(port["port"])
    return None


def ready_endpoints(slices: Iterable[Mapping[str, Any]], port_name: str | None = None) -> list[Endpoint]:
    """The endpoints of EndpointSlice dicts (camelCase, as the API serves them) that take traffic.

    Ready ones (``conditions.ready`` true or unset); if none, those still serving while
    terminating. ``port_name`` picks the Service port by name (default: the first TCP port).
    Sorted, without duplicates (an endpoint may sit in two slices while they are rewritten).
    """
    ready: set[Endpoint] = set()
    terminating: set[Endpoint] = set()
    for endpoint_slice in slices:
        if endpoint_slice.get("addressType") not in ("IPv4", "IPv6"):
            continue  # FQDN slices name hosts, not pods
        port = _slice_port(endpoint_slice, port_name)
        if port is None:
            continue
        for endpoint in endpoint_slice.get("endpoints") or []:
            addresses = endpoint.get("addresses") or []
            if not addresses:
                continue
            conditions = endpoint.get("conditions") or {}
            target = Endpoint(addresses[0], port)
            if conditions.get("ready") is not False:
                ready.add(target)
            elif conditions.get("serving") and conditions.get("terminating"):
                terminating.add(target)
    return sorted(ready or terminating)


class RoundRobin:
    """Picks endpoints in turn; the list may change between picks."""

    def __init__(self) -> None:
        self._turn = 0

    def pick(self, endpoints: Sequence[Endpoint]) -> Endpoint | None:
        if not endpoints:
            return None
        endpoint = endpoints[self._turn % len(endpoints)]
        self._turn += 1
        return endpoint


@dataclass(frozen=True)
class LoadStats:
    """What the driver did so far."""

    by_code: dict[int, int]  # responses by HTTP status code
    by_endpoint: dict[str, int]  # responses by endpoint IP
    by_version: dict[str, int]  # 200 responses by the modelVersion that answered
    transport_errors: dict[str, int]  # requests without a response, by exception type
    no_endpoint: int  # ticks with no endpoint to send to
    skipped: int  # ticks skipped because `concurrency` requests were in flight
    refresh_errors: int  # EndpointSlice reads that failed (the previous endpoints were kept)
    cut: int = 0  # streams: answers that began (200) but ended before their last event

    @property
    def responses(self) -> int:
        return sum(self.by_code.values())

    def share(self, codes: Callable[[int], bool]) -> float:
        """The share of responses whose code satisfies ``codes``, e.g. ``lambda c: c >= 500``."""
        total = self.responses
        return sum(n for c, n in self.by_code.items() if codes(c)) / total if total else 0.0


class LoadDriver:
    """Sends predictions at ``rate`` per second to the endpoints ``endpoints()`` returns, in a thread."""

    def __init__(
        self,
        endpoints: Callable[[], Sequence[Endpoint]],
        *,
        rate: float = 10.0,
        max_duration: float = 300.0,
        concurrency: int = 8,
        timeout: float = 5.0,
        instances: int = 1,
        refresh_seconds: float = REFRESH_SECONDS,
        host: str | None = None,
        path: str = PREDICT_PATH,
        body: Mapping[str, Any] | None = None,
        stream: bool = False,
        tag_header: str | None = None,
    ) -> None:
        """``stream``: the body asks for server-sent events (an OpenAI-compatible completion); a 200
        counts once its ``data: [DONE]`` arrives, an answer that stops before it is ``cut``, and
        ``timeout`` is the longest wait for the next event. ``tag_header``: each answer's value of that
        header (e.g. the backend a gateway chose) is kept with when its request was sent (:meth:`tagged`)."""
        if not 0 < rate <= MAX_RATE:
            raise ValueError(f"rate {rate}: give 0 < rate <= {MAX_RATE:g} requests per second")
        if not 0 < max_duration <= MAX_DURATION_SECONDS:
            raise ValueError(f"max_duration {max_duration}: give 0 < max_duration <= {MAX_DURATION_SECONDS:g}s")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency {concurrency}: give 1..{MAX_CONCURRENCY}")
        self.endpoint_source = endpoints
        self.rate = rate
        self.max_duration = max_duration
        self.concurrency = concurrency
        self.timeout = timeout
        self.refresh_seconds = refresh_seconds
        self.headers = {"Host": host} if host else {}  # a gateway routes by it
        self.path = path  # e.g. /v1/completions for an OpenAI-compatible server
        self._body = dict(body) if body is not None else predict_payload(instances)
        self._endpoints: list[Endpoint] = []
        self._turns = RoundRobin()
        self._stopping = threading.Event()
        self._in_flight = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()
        self._by_code: Counter[int] = Counter()
        self._by_endpoint: Counter[str] = Counter()
        self._by_version: Counter[str] = Counter()
        self._transport_errors: Counter[str] = Counter()
        self._no_endpoint = 0
        self._skipped = 0
        self._refresh_errors = 0
        self._cut = 0
        self.stream = stream
        self.tag_header = tag_header
        self._tagged: list[tuple[float, str, int]] = []
        self.last_refresh_error: str | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_service(
        cls, api: client.ApiClient, namespace: str, service: str, *, port_name: str | None = None, **options: Any
    ) -> LoadDriver:
        """A driver for a Service, reading its EndpointSlices through the Kubernetes API."""
        discovery = client.DiscoveryV1Api(api)

        def endpoints() -> list[Endpoint]:
            slices = discovery.list_namespaced_endpoint_slice(
                namespace, label_selector=f"{SERVICE_NAME_LABEL}={service}", _request_timeout=5
            )
            return ready_endpoints(api.sanitize_for_serialization(slices).get("items") or [], port_name)

        return cls(endpoints, **options)

    @classmethod
    def for_address(cls, ip: str, port: int, **options: Any) -> LoadDriver:
        """A driver for one fixed address, e.g. a gateway's listener (with ``host=`` for its routes)."""
        return cls(lambda: [Endpoint(ip, port)], **options)

    def start(self) -> LoadDriver:
        if self._thread is not None:
            raise RuntimeError("a LoadDriver starts once")
        self._thread = threading.Thread(target=self._run, name="loadgen", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> LoadStats:
        """Stop sending, wait for requests in flight (at most ``timeout``), and return the stats."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.stats()

    def wait(self, timeout: float) -> bool:
        """Wait until the driver stops on its own (``max_duration``); True if it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> LoadDriver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> LoadStats:
        with self._lock:
            return LoadStats(
                dict(self._by_code),
                dict(self._by_endpoint),
                dict(self._by_version),
                dict(self._transport_errors),
                self._no_endpoint,
                self._skipped,
                self._refresh_errors,
                self._cut,
            )

    def tagged(self) -> list[tuple[float, str, int]]:
        """(time.monotonic() when sent, the answer's ``tag_header``, its code; -1 for a cut stream) of each
        answer so far, with ``tag_header`` set."""
        with self._lock:
            return list(self._tagged)

    def _tag(self, sent: float, response: httpx.Response, code: int) -> None:
        if self.tag_header is not None:
            self._tagged.append((sent, response.headers.get(self.tag_header, ""), code))

    def _run(self) -> None:
        start = time.monotonic()
        deadline = start + self.max_duration
        next_refresh = start
        next_send = start
        period = 1.0 / self.rate
        with (
            httpx.Client(
                timeout=self.timeout,
                headers=self.headers,
                limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
            ) as http,  # fmt: skip
            ThreadPoolExecutor(self.concurrency, thread_name_prefix="loadgen-request") as pool,
        ):
            while not self._stopping.is_set():
                now = time.monotonic()
                if now >= deadline:
                    break
                if now >= next_refresh:
                    self._refresh()
                    next_refresh = now + self.refresh_seconds
                self._dispatch(pool, http)
                # after a stall, carry on at the rate instead of bursting to catch up
                next_send = max(next_send + period, now)
                self._stopping.wait(max(0.0, next_send - time.monotonic()))

    def _refresh(self) -> None:
        try:
            endpoints = list(self.endpoint_source())
        except Exception as exc:  # the API server may blink; keep sending to what we knew
            with self._lock:
                self._refresh_errors += 1
            self.last_refresh_error = repr(exc)
            return
        self._endpoints = endpoints

    def _dispatch(self, pool: ThreadPoolExecutor, http: httpx.Client) -> None:
        endpoint = self._turns.pick(self._endpoints)
        if endpoint is None:
            with self._lock:
                self._no_endpoint += 1
            return
        if not self._in_flight.acquire(blocking=False):
            with self._lock:
                self._skipped += 1
            return
        pool.submit(self._send, http, endpoint)

    def _send(self, http: httpx.Client, endpoint: Endpoint) -> None:
        if self.stream:
            self._send_stream(http, endpoint)
            return
        sent = time.monotonic()
        try:
            response = http.post(endpoint.url + self.path, json=self._body)
        except httpx.HTTPError as exc:
            with self._lock:
                self._transport_errors[type(exc).__name__] += 1
            return
        finally:
            self._in_flight.release()
        version = None
        if response.status_code == 200:
            with contextlib.suppress(ValueError, AttributeError):
                answered = response.json().get("modelVersion")
                version = None if answered is None else str(answered)
        with self._lock:
            self._by_code[response.status_code] += 1
            self._by_endpoint[endpoint.ip] += 1
            self._tag(sent, response, response.status_code)
            if version is not None:
                self._by_version[version] += 1

    def _send_stream(self, http: httpx.Client, endpoint: Endpoint) -> None:
        code, done, error, answer = 0, False, None, None
        sent = time.monotonic()
        try:
            with http.stream("POST", endpoint.url + self.path, json=self._body) as response:
                code, answer = response.status_code, response
                for line in response.iter_lines():
                    if line.strip() == "data: [DONE]":
                        done = True
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        finally:
            self._in_flight.release()
        with self._lock:
            if answer is not None:
                self._tag(sent, answer, -1 if code == 200 and not done else code)
            if code == 0:
                self._transport_errors[error or "NoAnswer"] += 1
            elif code == 200 and not done:
                self._cut += 1
            else:
                self._by_code[code] += 1
                self._by_endpoint[endpoint.ip] += 1
