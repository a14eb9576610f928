"""The Prometheus client against real HTTP servers on 127.0.0.1 that answer what a hostile or
mistaken address would: nothing they send reaches a message (status, conditions, Events); and
the operator's allow-list of Prometheus addresses."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from slipway import prometheus
from slipway.config import OperatorConfig, parse_url_list
from slipway.inference.analysis import AnalysisOutcome
from slipway.inference.model import Analysis, AnalysisMetric
from slipway.inference.providers import Services, Target, analyse
from slipway.prometheus import PrometheusClient, address_refusal

SECRET = "s3cr3t-internal-value"
NOW = "2025-01-01T00:00:00Z"


@dataclass
class Answer:
    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Server:
    url: str
    answer: Answer
    asked: list[str]


@pytest.fixture
def server() -> Iterator[Server]:
    """A real HTTP server; each test sets what it answers to every request."""
    state = Server("", Answer(), [])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.asked.append(self.path)
            answer = state.answer
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as httpd:
        state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True).start()
        yield state
        httpd.shutdown()


def everything_written(outcome: AnalysisOutcome) -> str:
    """All the text an analysis gives the status, conditions and Events."""
    return json.dumps([outcome.reason, outcome.to_status(), [r.message for r in outcome.results]])


def analysed(client: PrometheusClient, settings: Analysis) -> AnalysisOutcome:
    """The analysis the operator runs (providers.analyse), ``client`` lent as its own Prometheus."""
    return analyse(Target(settings, "a", "d"), Services(None, client, client.timeout), NOW)


def ask(url: str, query: str = "sum(up)") -> AnalysisOutcome:
    client = PrometheusClient(url, timeout=5)
    try:
        return analysed(client, Analysis(metrics=[AnalysisMetric(name="m", max=1, query=query)]))
    finally:
        client.close()


def js(value: object) -> bytes:
    return json.dumps(value).encode()


def success(result_type: str, result: object) -> Answer:
    return Answer(
        200, "application/json", js({"status": "success", "data": {"resultType": result_type, "result": result}})
    )


def refusal(status: int, error_type: str) -> Answer:
    return Answer(status, "application/json", js({"status": "error", "errorType": error_type, "error": SECRET}))


HTML = f"<html><title>Admin console</title><body>token={SECRET}</body></html>".encode()
NOT_JSON = "without Prometheus' JSON"
TWO_SERIES = [
    {"metric": {"pod": SECRET, "job": "x"}, "value": [0, "1"]},
    {"metric": {"pod": "other", "job": "x", f"bad-{SECRET}": "1"}, "value": [0, "2"]},
]
HOSTILE = {
    "html-404": (Answer(404, "text/html", HTML), f"answered 404 to /api/v1/query {NOT_JSON} (not a Prometheus API?)"),
    "html-200": (Answer(200, "text/html", HTML), f"answered 200 to /api/v1/query {NOT_JSON}"),
    "json-not-prometheus": (Answer(200, "application/json", js({"password": SECRET})), NOT_JSON),
    "broken-json": (Answer(200, "application/json", b"{" + SECRET.encode()), NOT_JSON),
    "401": (Answer(401, "text/plain", SECRET.encode()), "it wants credentials, which the operator does not send"),
    "bad-data": (refusal(400, "bad_data"), "refused the query (400 bad_data); paste it (status.analysis[].query)"),
    "unknown-error-type": (refusal(422, SECRET), "refused the query (422);"),
    "unknown-result-type": (success(SECRET, []), "with something that is not a query result"),
    "value-not-a-number": (success("vector", [{"metric": {}, "value": [0, SECRET]}]), "not a query result"),
    "matrix": (success("matrix", []), "returns a range vector"),
    "several-series": (success("vector", TWO_SERIES), "answered 2 series (they differ by pod); aggregate it to one"),
}


@pytest.mark.parametrize(("answer", "words"), HOSTILE.values(), ids=HOSTILE.keys())
def test_answers_that_are_no_measurement_never_reach_a_message(server: Server, answer: Answer, words: str) -> None:
    server.answer = answer
    outcome = ask(server.url)
    written = everything_written(outcome)
    assert outcome.verdict == "Inconclusive" and not outcome.source_unavailable
    assert words in written
    assert SECRET not in written and "Admin console" not in written
    assert "fix the metric's query in spec.rollout.analysis.metrics" in outcome.reason


def test_a_server_error_holds_the_step_without_its_body(server: Server) -> None:
    server.answer = Answer(503, "text/html", HTML)
    outcome = ask(server.url)
    assert outcome.source_unavailable and SECRET not in everything_written(outcome)
    assert f"Prometheus at {server.url} answered 503 to /api/v1/query" in outcome.reason


def test_a_redirect_is_not_followed(server: Server) -> None:
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler) as elsewhere:
        target = f"http://127.0.0.1:{elsewhere.server_address[1]}/internal?{SECRET}"
        server.answer = Answer(302, "text/html", HTML, {"Location": target})
        outcome = ask(server.url)
    assert "a redirect, which the operator does not follow" in outcome.reason
    assert SECRET not in everything_written(outcome) and len(server.asked) == 1


def test_an_answer_too_large_is_refused(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "MAX_ANSWER_BYTES", 1024)
    server.answer = Answer(200, "application/json", js({"status": "success", "padding": SECRET * 100}))
    outcome = ask(server.url)
    assert "answered more than" in outcome.reason and SECRET not in everything_written(outcome)


def test_a_service_that_does_not_speak_http_is_unreachable_without_its_banner() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def banner() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.sendall(f"SSH-2.0-OpenSSH_9.6 {SECRET}\r\n\r\n".encode())
                conn.recv(65536)

        threading.Thread(target=banner, daemon=True).start()
        outcome = ask(f"http://127.0.0.1:{listener.getsockname()[1]}")
    assert outcome.source_unavailable
    assert "unreachable: it answered something that is not HTTP" in outcome.reason
    assert SECRET not in everything_written(outcome)


def test_credentials_in_the_address_are_never_written(server: Server) -> None:
    server.answer = Answer(404, "text/html", HTML)
    outcome = ask(server.url.replace("http://", f"http://ops:{SECRET}@") + f"/?token={SECRET}")
    assert SECRET not in everything_written(outcome)
    assert "http://***@127.0.0.1:" in outcome.reason
    assert SECRET not in repr(PrometheusClient(f"http://ops:{SECRET}@prom:9090"))


def test_a_healthy_answer_is_still_measured(server: Server) -> None:
    server.answer = success("vector", [{"metric": {}, "value": [0, "0.5"]}])
    outcome = ask(server.url)
    assert outcome.verdict == "Passed" and outcome.results[0].value == 0.5


# --- the allow-list ----------------------------------------------------------------------------

OWN = "http://prometheus.monitoring.svc:9090"


def config(*allowed: str, own: str | None = OWN) -> OperatorConfig:
    return OperatorConfig(prometheus_url=own, allowed_prometheus_urls=allowed)


@pytest.mark.parametrize(
    "address",
    [
        OWN,
        OWN + "/",
        "HTTP://Prometheus.Monitoring.SVC:9090",
        "http://thanos.monitoring:10902/prom",  # on the list, which also has the own one
        "http://thanos.monitoring:10902/prom/",
        "https://vm.example.com/select/0/prometheus",  # https: port 443
    ],
)
def test_allowed_addresses(address: str) -> None:
    allowed = config("http://thanos.monitoring:10902/prom/", "https://vm.example.com:443/select/0/prometheus")
    assert address_refusal(address, allowed) is None


@pytest.mark.parametrize(
    "address",
    [
        "http://prometheus.monitoring.svc:9091",  # another port
        "https://prometheus.monitoring.svc:9090",  # another scheme
        "http://prometheus.monitoring.svc:9090/other",  # another path
        "http://vault.internal:8200",
        "http://169.254.169.254/latest/meta-data",
        "http://127.0.0.1:9090",
    ],
)
def test_other_addresses_are_refused_naming_the_field_and_the_fix(address: str) -> None:
    message = address_refusal(address, config())
    assert message is not None
    assert message.startswith(f"spec.rollout.analysis.prometheus.address '{address}' is not a Prometheus")
    assert message.endswith(
        "add it to the operator's --allowed-prometheus-urls, or leave the field out to use the operator's Prometheus"
    )


@pytest.mark.parametrize(
    "address",
    [
        f"http://ops:{SECRET}@prometheus.monitoring.svc:9090",  # credentials, even for the allowed host
        f"http://prometheus.monitoring.svc:9090@evil.example.com/?token={SECRET}",
        f"http://prometheus.monitoring.svc:9090/?token={SECRET}",
        "http://prometheus.monitoring.svc:9090/#x",
        "http://prometheus.monitoring.svc:9090\\@evil.example.com",
        "prometheus.monitoring.svc:9090",
        "file:///etc/passwd",
    ],
)
def test_addresses_that_are_not_plain_urls_are_refused_without_their_credentials(address: str) -> None:
    message = address_refusal(address, config(address))
    assert message is not None and "is not a plain http(s) URL" in message and SECRET not in message


def test_without_a_list_only_the_operators_own_prometheus_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLIPWAY_ALLOWED_PROMETHEUS_URLS", raising=False)
    monkeypatch.setenv("SLIPWAY_PROMETHEUS_URL", OWN)
    assert OperatorConfig().allowed_prometheus_urls == (OWN,)
    monkeypatch.setenv("SLIPWAY_ALLOWED_PROMETHEUS_URLS", " http://a:9090 ,, https://b/prom,")
    assert OperatorConfig().allowed_prometheus_urls == (OWN, "http://a:9090", "https://b/prom")
    no_prometheus = address_refusal(OWN, config(own=None))
    assert no_prometheus is not None
    assert no_prometheus.endswith("give the operator a --prometheus-url and leave the field out")


def test_a_bad_entry_of_the_list_is_refused_without_its_credentials() -> None:
    with pytest.raises(ValueError, match=r"'http://\*\*\*@' is not an http\(s\) URL") as caught:
        parse_url_list(f"http://ok:9090,http://ops:{SECRET}@")
    assert SECRET not in str(caught.value)


def test_an_analysis_asks_no_address_the_operator_refuses(server: Server) -> None:
    settings = Analysis(prometheus={"address": server.url}, metrics=[AnalysisMetric(name="m", max=1, query="up")])
    now = datetime(2025, 1, 1, tzinfo=UTC)
    outcome = analyse(Target(settings, "a", "d"), Services(config(), None, 5), now)
    assert outcome.verdict == "Inconclusive" and "--allowed-prometheus-urls" in outcome.reason
    assert server.asked == []
    server.answer = success("scalar", [0, "0"])
    outcome = analyse(Target(settings, "a", "d"), Services(config(server.url), None, 5), now)
    assert outcome.verdict == "Passed" and len(server.asked) == 1


def test_every_query_carries_a_deadline_on_prometheus_time(server):
    server.answer = Answer(
        body=json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
    )
    PrometheusClient(server.url, timeout=7).query("up")
    from urllib.parse import parse_qs, urlsplit

    asked = parse_qs(urlsplit(server.asked[-1]).query)
    assert asked["timeout"] == ["7s"] and asked["query"] == ["up"]


def test_a_dry_run_query_that_times_out_leaves_the_deciding_metrics_measured(server: Server) -> None:
    """Prometheus answers the heavy dry-run query 503 (its query timeout) and the others normally."""
    import urllib.parse

    ok = success("vector", [{"metric": {}, "value": [0, "0.01"]}])
    timeout = Answer(503, "application/json", js({"status": "error", "errorType": "timeout", "error": "timeout"}))

    class ByQuery(Answer):  # what the server answers depends on the query it is asked
        def __getattribute__(self, name: str) -> object:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(server.asked[-1]).query).get("query", [""])[0]
            return getattr(timeout if "heavy" in query else ok, name)

    server.answer = ByQuery()
    metrics = [AnalysisMetric(name="new", max=1, query="sum(heavy)", dryRun=True),
               AnalysisMetric(name="errors", max=0.05, query="sum(errors)", maxRelativeToStable=2)]  # fmt: skip
    client = PrometheusClient(server.url, timeout=5)
    try:
        outcome = analysed(client, Analysis(metrics=metrics))
    finally:
        client.close()
    new, errors = outcome.results
    assert (new.result, new.dry_run) == ("Inconclusive", True)
    assert errors.result == "Passed" and errors.value == 0.01 and errors.stable_value == 0.01
    assert outcome.verdict == "Passed" and not outcome.source_unavailable


def test_without_prometheus_metrics_in_dry_run_hold_nothing() -> None:
    from slipway.inference.analysis import not_measured

    only_dry = not_measured([AnalysisMetric(name="m", max=1, query="q", dryRun=True)], NOW, "no Prometheus")
    assert only_dry.verdict == "Passed" and only_dry.results[0].to_status()["dryRun"] is True
    mixed = not_measured([AnalysisMetric(name="m", max=1, query="q", dryRun=True),
                          AnalysisMetric(name="e", max=1, query="q")], NOW, "no Prometheus")  # fmt: skip
    assert mixed.verdict == "Inconclusive"
