"""The load driver: endpoints from EndpointSlices, round-robin, the payload, and a short run
against two loopback HTTP servers (no cluster)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.workloads.servehttp import parse_instances
from slipway_e2e.loadgen import Endpoint, LoadDriver, RoundRobin, predict_payload, ready_endpoints


def endpoint_slice(*endpoints: dict[str, Any], ports=(("http", 8080),), address_type: str = "IPv4") -> dict[str, Any]:
    return {
        "addressType": address_type,
        "endpoints": list(endpoints),
        "ports": [{"name": name, "port": port, "protocol": "TCP"} for name, port in ports],
    }


def ep(ip: str, ready: bool | None = True, serving: bool | None = None, terminating: bool | None = None) -> dict:
    conditions = {
        k: v for k, v in {"ready": ready, "serving": serving, "terminating": terminating}.items() if v is not None
    }
    return {"addresses": [ip], "conditions": conditions}


@pytest.mark.parametrize(
    ("slices", "port_name", "expected"),
    [
        ([], None, []),
        (
            [endpoint_slice(ep("10.0.0.2"), ep("10.0.0.1"))],
            None,
            [Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080)],
        ),
        # not ready is left out; an unset ready counts as ready (the API's rule)
        ([endpoint_slice(ep("10.0.0.1", ready=False), ep("10.0.0.2", ready=None))], None, [Endpoint("10.0.0.2", 8080)]),
        # serving-but-terminating only when nothing is ready
        (
            [endpoint_slice(ep("10.0.0.1", ready=False, serving=True, terminating=True), ep("10.0.0.2"))],
            None,
            [Endpoint("10.0.0.2", 8080)],
        ),
        (
            [endpoint_slice(ep("10.0.0.1", ready=False, serving=True, terminating=True), ep("10.0.0.3", ready=False))],
            None,
            [Endpoint("10.0.0.1", 8080)],
        ),
        # an endpoint in two slices (while they are rewritten) counts once; slices may carry other ports
        (
            [endpoint_slice(ep("10.0.0.1")), endpoint_slice(ep("10.0.0.1"), ep("10.0.0.4"), ports=(("http", 9090),))],
            None,
            [Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.1", 9090), Endpoint("10.0.0.4", 9090)],
        ),
        # the port by name, else the first TCP port
        (
            [endpoint_slice(ep("10.0.0.1"), ports=(("metrics", 9100), ("http", 8080)))],
            "http",
            [Endpoint("10.0.0.1", 8080)],
        ),
        (
            [endpoint_slice(ep("10.0.0.1"), ports=(("metrics", 9100), ("http", 8080)))],
            None,
            [Endpoint("10.0.0.1", 9100)],
        ),
        ([endpoint_slice(ep("10.0.0.1"))], "grpc", []),
        # FQDN slices and endpoints without addresses are skipped
        ([endpoint_slice(ep("db.example.com"), address_type="FQDN")], None, []),
        ([endpoint_slice({"addresses": [], "conditions": {"ready": True}})], None, []),
        ([endpoint_slice(ep("fd00::1"), address_type="IPv6")], None, [Endpoint("fd00::1", 8080)]),
    ],
)
def test_ready_endpoints(slices, port_name, expected):
    assert ready_endpoints(slices, port_name) == expected


def test_only_the_first_address_of_an_endpoint_is_used_as_kube_proxy_does():
    s = endpoint_slice({"addresses": ["10.0.0.1", "10.0.0.9"], "conditions": {"ready": True}})
    assert ready_endpoints([s]) == [Endpoint("10.0.0.1", 8080)]


def test_urls_bracket_ipv6():
    assert Endpoint("10.0.0.1", 80).url == "http://10.0.0.1:80"
    assert Endpoint("fd00::1", 8080).url == "http://[fd00::1]:8080"


def test_round_robin_spreads_evenly_and_follows_changes():
    turns = RoundRobin()
    a, b, c = Endpoint("10.0.0.1", 80), Endpoint("10.0.0.2", 80), Endpoint("10.0.0.3", 80)
    assert [turns.pick([a, b]) for _ in range(4)] == [a, b, a, b]
    picks = [turns.pick([a, b, c]) for _ in range(300)]
    assert {e: picks.count(e) for e in (a, b, c)} == {a: 100, b: 100, c: 100}
    assert turns.pick([]) is None


def test_the_payload_is_a_valid_prediction_request():
    body = predict_payload(instances=3)
    assert parse_instances(json.dumps(body).encode()).shape == (3, 64)


@pytest.mark.parametrize(
    "options", [{"rate": 0}, {"rate": 10_000}, {"max_duration": 0}, {"max_duration": 10**6}, {"concurrency": 0}]
)
def test_bounds_are_enforced(options):
    with pytest.raises(ValueError):
        LoadDriver(lambda: [], **options)


# --- a short run against real HTTP servers on two loopback addresses --------------------------


class _Predictor(BaseHTTPRequestHandler):
    status = 200

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[list[Endpoint]]:
    """A healthy server on 127.0.0.1 and a failing one on 127.0.0.2, as two pods would be."""
    running = []
    for ip, status in (("127.0.0.1", 200), ("127.0.0.2", 500)):
        server = ThreadingHTTPServer((ip, 0), _Predictor)
        server.status = status  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        running.append(server)
    yield [Endpoint(s.server_address[0], s.server_address[1]) for s in running]
    for server in running:
        server.shutdown()
        server.server_close()


def test_requests_are_spread_over_the_endpoints_and_counted(servers):
    with LoadDriver(lambda: servers, rate=200, max_duration=10) as load:
        wait_for(lambda: load.stats().responses >= 40, 10, "40 responses")
    stats = load.stats()
    assert not load.running
    assert set(stats.by_endpoint) == {"127.0.0.1", "127.0.0.2"}
    assert abs(stats.by_endpoint["127.0.0.1"] - stats.by_endpoint["127.0.0.2"]) <= 2 + stats.skipped
    assert set(stats.by_code) == {200, 500} and 0.4 <= stats.share(lambda c: c >= 500) <= 0.6


def test_it_stops_by_itself_after_max_duration(servers):
    load = LoadDriver(lambda: servers[:1], rate=50, max_duration=0.3).start()
    assert load.wait(5)
    assert load.stats().by_code.get(200, 0) >= 1


def test_no_endpoints_and_a_failing_source_are_counted_not_fatal():
    calls = {"n": 0}

    def flaky() -> list[Endpoint]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ConnectionError("API server gone")
        return []

    load = LoadDriver(flaky, rate=100, max_duration=5, refresh_seconds=0.01).start()
    wait_for(lambda: load.stats().refresh_errors >= 2 and load.stats().no_endpoint >= 2, 5, "refresh errors")
    stats = load.stop()
    assert stats.responses == 0 and "API server gone" in (load.last_refresh_error or "")


def test_for_service_reads_the_services_endpoint_slices_through_the_official_client():
    """The client's own request and deserialization, against a canned API server answer."""
    answer = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSliceList",
        "metadata": {},
        "items": [{"metadata": {"name": "digits-abc"}, **endpoint_slice(ep("10.0.0.2"), ep("10.0.0.1", ready=False))}],
    }
    asked: list[str] = []

    class ApiServer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    api = client.ApiClient(configuration)
    try:
        load = LoadDriver.for_service(api, "team-a", "digits", port_name="http")
        assert load.endpoint_source() == [Endpoint("10.0.0.2", 8080)]
    finally:
        api.close()
        server.shutdown()
        server.server_close()
    [path] = asked
    url = urllib.parse.urlsplit(path)
    assert url.path == "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices"
    assert urllib.parse.parse_qs(url.query) == {"labelSelector": ["kubernetes.io/service-name=digits"]}
