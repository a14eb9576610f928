"""The MLflow client's pure parts: filters, URIs, error mapping, parsing, auth.

Its conversations with a real server are in tests/integration/test_mlflow_client.py.
"""

from __future__ import annotations

import http.server
import json
import math
import socket
import socketserver
import threading
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import REGISTRY

from slipway.mlflow import (
    MlflowClient,
    MlflowError,
    MlflowNotFound,
    MlflowUnavailable,
    ModelUri,
    ModelVersion,
    Run,
    RunUri,
    model_version_filter,
    parse_model_uri,
    parse_run_uri,
    run_artifact_uri,
    tag_filter,
)
from slipway.mlflow import errors as mlflow_errors
from slipway.mlflow import http as mlflow_http
from slipway.mlflow import tracking as mlflow_tracking


def test_model_version_filter_quotes_tag_keys_with_backticks() -> None:
    assert (
        model_version_filter("digits", {"slipway.dev/uid": "1234", "method": "int8"})
        == "name='digits' and tags.`slipway.dev/uid`='1234' and tags.`method`='int8'"
    )
    assert model_version_filter("digits") == "name='digits'"


def test_tag_filter_for_runs() -> None:
    assert tag_filter("slipway.dev/uid", "abc") == "tags.`slipway.dev/uid` = 'abc'"


@pytest.mark.parametrize(("name", "tags"), [("it's", {}), ("m", {"k": "a'b"}), ("m", {"a`b": "v"})])
def test_filters_refuse_what_mlflow_cannot_escape(name: str, tags: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="MLflow filters cannot express"):
        model_version_filter(name, tags)


def test_run_artifact_uri() -> None:
    assert run_artifact_uri("abc", "model/") == "runs:/abc/model"
    assert run_artifact_uri("abc") == "runs:/abc"


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("models:/digits/3", ModelUri("digits", version="3")),
        ("models:/digits/3/sub/dir/", ModelUri("digits", version="3", path="sub/dir")),
        ("models://digits/3", ModelUri("digits", version="3")),
        ("models:/digits@production", ModelUri("digits", alias="production")),
        ("models:/digits/Production", ModelUri("digits", version="Production")),  # a stage: no registered version
        ("models:/m-abc", ModelUri("m-abc")),  # an MLflow 3 logged model
        ("runs:/abc/model", None),
        ("mlflow-artifacts:/1/abc/artifacts", None),
    ],
)
def test_model_uris(uri: str, parsed: ModelUri | None) -> None:
    assert parse_model_uri(uri) == parsed


@pytest.mark.parametrize(
    ("uri", "version"),
    [("models:/d/3", "3"), ("models:/d/Production", None), ("models:/d@a", None), ("models:/x", None)],
)
def test_only_numbered_versions_are_registered_versions(uri: str, version: str | None) -> None:
    model = parse_model_uri(uri)
    assert model is not None and model.registered_version == version


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("runs:/abc/model", RunUri("abc", "model")),
        ("runs://abc/model/model.onnx", RunUri("abc", "model/model.onnx")),
        ("runs:/abc", RunUri("abc")),
        ("models:/digits/3", None),
    ],
)
def test_run_uris(uri: str, parsed: RunUri | None) -> None:
    assert parse_run_uri(uri) == parsed


def _answer(status: int, body: object = None, text: str = "") -> httpx.Response:
    if body is not None:
        return httpx.Response(status, json=body)
    return httpx.Response(status, text=text)


@pytest.mark.parametrize(
    ("response", "what", "expected"),
    [
        (
            _answer(404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Run x not found"}),
            "GET /runs/get",
            MlflowNotFound,
        ),
        (_answer(400, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "gone"}), "GET /x", MlflowNotFound),
        (
            _answer(
                400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "Registered model alias prod not found."}
            ),
            "GET /api/2.0/mlflow/registered-models/alias",
            MlflowNotFound,
        ),
        (
            _answer(400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "Missing value for 'name'"}),
            "GET /api/2.0/mlflow/registered-models/alias",
            MlflowError,
        ),
        (_answer(400, {"error_code": "RESOURCE_ALREADY_EXISTS", "message": "exists"}), "POST /create", MlflowError),
        (_answer(503, text="upstream down"), "GET /runs/get", MlflowUnavailable),
        (
            _answer(500, {"error_code": "INTERNAL_ERROR", "message": "db locked"}),
            "POST /runs/log-batch",
            MlflowUnavailable,
        ),
        (  # MLflow 3.0's answer to the download of an absent artifact: not an outage
            _answer(500, {"error_code": "INTERNAL_ERROR", "message": "[Errno 2] No such file or directory: '/a/x'"}),
            "download runs:/r/absent",
            MlflowNotFound,
        ),
        (_answer(429, {"error_code": "REQUEST_LIMIT_EXCEEDED", "message": "slow down"}), "GET /x", MlflowUnavailable),
        (_answer(403, {"error_code": "PERMISSION_DENIED", "message": "no"}), "GET /x", MlflowError),
    ],
)
def test_answers_map_to_exceptions(response: httpx.Response, what: str, expected: type[MlflowError]) -> None:
    with pytest.raises(MlflowError) as caught:
        mlflow_errors.raise_for_answer(response, what, "http://mlflow:5000")
    assert type(caught.value) is expected
    assert caught.value.status == response.status_code


def test_error_names_the_request_code_and_fix() -> None:
    with pytest.raises(MlflowError) as caught:
        mlflow_errors.raise_for_answer(
            _answer(401, {"error_code": "UNAUTHENTICATED", "message": "bad credentials"}), "GET /runs/get", "http://m"
        )
    text = str(caught.value)
    assert "GET /runs/get" in text and "UNAUTHENTICATED" in text and "HTTP 401" in text
    assert "MLFLOW_TRACKING_TOKEN" in text


def test_success_raises_nothing() -> None:
    mlflow_errors.raise_for_answer(_answer(200, {}), "GET /x", "http://m")


def test_unreachable_server_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        client = MlflowClient(f"http://127.0.0.1:{port}", timeout=2)
        with pytest.raises(MlflowUnavailable, match="unreachable"):
            client.get_run("abc")


def sent(outcome: str) -> float:
    """How many requests the client has sent to MLflow with this outcome, as the operator's metric counts them."""
    return REGISTRY.get_sample_value("slipway_external_requests_total", {"service": "mlflow", "outcome": outcome}) or 0


def test_only_idempotent_requests_are_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real server that drops every connection: reads are retried, creates are not; each try counts."""
    monkeypatch.setattr(mlflow_http, "_RETRY_BACKOFF_SECONDS", (0.0,))  # no waiting between retries
    connections = 0

    class Drop(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            nonlocal connections
            connections += 1
            self.request.recv(65536)  # read the request, then close without an answer

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Drop) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        client = MlflowClient(f"http://127.0.0.1:{server.server_address[1]}", retries=2, timeout=5)
        errors = sent("error")
        with pytest.raises(MlflowUnavailable):
            client.get_run("abc")
        assert connections == 3 and sent("error") == errors + 3
        with pytest.raises(MlflowUnavailable):
            client.create_run("1", "r")
        assert connections == 4 and sent("error") == errors + 4
        server.shutdown()


def paged_server(pages: dict[str, list[object]], asked: list[httpx.Request]) -> MlflowClient:
    """An MLflow that answers every search from ``pages`` (page token -> items), linking them in order."""
    tokens = list(pages)

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        body = json.loads(request.content) if request.content else dict(request.url.params)
        token = body.get("page_token", "")
        following = tokens[tokens.index(token) + 1 :]
        items = pages[token]
        key = "runs" if "runs" in request.url.path else "model_versions"
        return httpx.Response(200, json={key: items, "next_page_token": following[0] if following else ""})

    return MlflowClient("http://mlflow:5000", transport=httpx.MockTransport(answer))


def test_searches_follow_pages_and_stop_at_max_results() -> None:
    def run(i: int) -> dict[str, object]:
        return {"info": {"run_id": f"r{i}", "experiment_id": "1"}}

    asked: list[httpx.Request] = []
    client = paged_server({"": [run(1), run(2)], "p2": [run(3)], "p3": [run(4)]}, asked)
    assert [r.run_id for r in client.search_runs(["1"])] == ["r1", "r2", "r3", "r4"]
    assert len(asked) == 3 and json.loads(asked[2].content)["page_token"] == "p3"
    asked.clear()
    assert [r.run_id for r in client.search_runs(["1"], max_results=2)] == ["r1", "r2"]
    assert len(asked) == 1  # the first page held enough: the next is not asked for

    asked.clear()
    versions = [{"name": "m", "version": str(i)} for i in (3, 2, 1)]
    client = paged_server({"": versions[:2], "p2": versions[2:]}, asked)
    assert [v.version for v in client.search_model_versions("name='m'")] == ["3", "2", "1"]
    assert [r.url.params.get("page_token") for r in asked] == [None, "p2"]


def test_run_from_json_keeps_latest_metrics_params_and_tags() -> None:
    run = Run.from_json(
        {
            "info": {
                "run_uuid": "r1",
                "experiment_id": "3",
                "run_name": "train",
                "status": "RUNNING",
                "start_time": 1700000000000,
                "artifact_uri": "mlflow-artifacts:/3/r1/artifacts",
            },
            "data": {
                "metrics": [{"key": "loss", "value": 0.25, "timestamp": 5, "step": 7}],
                "params": [{"key": "steps", "value": "30"}],
                "tags": [{"key": "slipway.checkpoint.step", "value": "5"}],
            },
        }
    )
    assert run.run_id == "r1" and run.experiment_id == "3" and run.end_time is None
    assert run.metrics["loss"].step == 7 and run.metrics["loss"].value == 0.25
    assert run.params == {"steps": "30"} and run.tags == {"slipway.checkpoint.step": "5"}


def test_model_version_from_json() -> None:
    version = ModelVersion.from_json(
        {
            "name": "digits",
            "version": "4",
            "source": "runs:/r1/model",
            "tags": [{"key": "k", "value": "v"}],
            "aliases": ["candidate"],
        }
    )
    assert version.version == "4" and version.uri == "models:/digits/4"
    assert version.tags == {"k": "v"} and version.aliases == ("candidate",)


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("mlflow-artifacts:/1/r1/artifacts/model", "1/r1/artifacts/model"),
        ("mlflow-artifacts://mlflow:5000/1/r1/artifacts/model", "1/r1/artifacts/model"),
        ("http://mlflow:5000/api/2.0/mlflow-artifacts/artifacts/1/r1/artifacts", "1/r1/artifacts"),
    ],
)
def test_proxied_artifact_uris_resolve_without_a_request(uri: str, path: str) -> None:
    assert MlflowClient("http://mlflow:5000").resolve_artifact_path(uri) == path


def test_artifacts_outside_the_proxy_are_refused_with_the_fix() -> None:
    with pytest.raises(MlflowError, match="--serve-artifacts"):
        MlflowClient("http://mlflow:5000").resolve_artifact_path("s3://bucket/model")


def test_non_finite_metrics_use_protobuf_json_spellings() -> None:
    assert mlflow_tracking._json_number(math.nan) == "NaN"
    assert mlflow_tracking._json_number(math.inf) == "Infinity"
    assert mlflow_tracking._json_number(-math.inf) == "-Infinity"
    assert mlflow_tracking._json_number(1) == 1.0


def test_bearer_token_from_env_is_sent_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real HTTP server records the Authorization header the client sends."""
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "s3cr3t")
    seen: list[str] = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("authorization", ""))
            body = json.dumps({"registered_model": {"name": "m"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        client = MlflowClient(f"http://127.0.0.1:{server.server_address[1]}")
        ok = sent("ok")
        client.get_registered_model("m")
        server.shutdown()
    assert seen == ["Bearer s3cr3t"] and sent("ok") == ok + 1
    assert "s3cr3t" not in repr(client) and "s3cr3t" not in repr(client._http.auth)


def test_basic_auth_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ops")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw")
    assert isinstance(mlflow_http._auth_from_env(), httpx.BasicAuth)


def test_tracking_uri_must_be_http(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI"):
        MlflowClient("file:///tmp/mlruns")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI is not set"):
        MlflowClient.from_env()


def test_run_url_points_at_the_ui() -> None:
    client = MlflowClient("http://mlflow:5000/")
    assert client.run_url("3", "r1") == "http://mlflow:5000/#/experiments/3/runs/r1"
    assert (
        client.run_url("3", "r1", ui_base="https://ml.example.com") == "https://ml.example.com/#/experiments/3/runs/r1"
    )


def test_update_run_refuses_unknown_status() -> None:
    with pytest.raises(ValueError, match="run status"):
        MlflowClient("http://mlflow:5000").update_run("r1", status="DONE")


# --- what an answer may put in a message (status, conditions, Events) --------------------------

SECRET = "s3cr3t-internal-value"


class Scripted(http.server.BaseHTTPRequestHandler):
    """Answers every request with the class's (status, content type, body); records Authorization."""

    answer: tuple[int, str, bytes] = (200, "application/json", b"{}")
    seen: list[str] = []

    def _reply(self) -> None:
        type(self).seen.append(self.headers.get("authorization", ""))
        status, content_type, body = self.answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[tuple[type[Scripted], int]]:
    handler = type("Answer", (Scripted,), {"seen": []})
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
        yield handler, server.server_address[1]
        server.shutdown()


def mlflow_error(status: int, error_code: str, message: str) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps({"error_code": error_code, "message": message}).encode()


HTML = f"<html><body>Internal admin page, token={SECRET}</body></html>".encode()
RUN_GET = "GET /api/2.0/mlflow/runs/get (run_id='abc')"
ANSWERS = {
    "html-404": ((404, "text/html", HTML), MlflowNotFound, "not found without an MLflow error"),
    "html-400": ((400, "text/html", HTML), MlflowError, "refused without an MLflow error"),
    "html-200": ((200, "text/html", HTML), MlflowUnavailable, f"{RUN_GET} answered an HTML page, not JSON"),
    "odd-content-type": ((200, f"{SECRET}/{SECRET}", HTML), MlflowUnavailable, "answered something, not JSON"),
    "json-5xx": (
        mlflow_error(500, "INTERNAL_ERROR", f"(psycopg2) postgresql://u:{SECRET}@db"),
        MlflowUnavailable,
        f"could not serve {RUN_GET} now [INTERNAL_ERROR] (HTTP 500)",
    ),
    "json-4xx": (
        mlflow_error(400, "INVALID_PARAMETER_VALUE", SECRET),
        MlflowError,
        f"{RUN_GET}: a parameter was refused as invalid [INVALID_PARAMETER_VALUE] (HTTP 400)",
    ),
    "not-an-error-code": (mlflow_error(400, f"{SECRET} is here", SECRET), MlflowError, "without an MLflow error"),
}


@pytest.mark.parametrize(("answer", "raised", "words"), ANSWERS.values(), ids=ANSWERS.keys())
def test_nothing_an_answer_says_reaches_the_message(
    scripted: tuple[type[Scripted], int],
    answer: tuple[int, str, bytes],
    raised: type[MlflowError],
    words: str,
) -> None:
    handler, port = scripted
    handler.answer = answer
    client = MlflowClient(f"http://127.0.0.1:{port}")
    with pytest.raises(MlflowError) as caught:
        client.get_run("abc")
    assert type(caught.value) is raised
    assert words in str(caught.value) and SECRET not in str(caught.value)


def test_mlflows_own_explanation_goes_to_the_debug_log_only(
    scripted: tuple[type[Scripted], int], caplog: pytest.LogCaptureFixture
) -> None:
    handler, port = scripted
    handler.answer = (404, "application/json", b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Run abc gone"}')
    with caplog.at_level("DEBUG", logger="slipway.mlflow.errors"), pytest.raises(MlflowNotFound) as caught:
        MlflowClient(f"http://127.0.0.1:{port}").get_run("abc")
    assert "Run abc gone" in caplog.text and "Run abc gone" not in str(caught.value)
    assert str(caught.value) == (
        "MLflow GET /api/2.0/mlflow/runs/get (run_id='abc'): not found [RESOURCE_DOES_NOT_EXIST] (HTTP 404)"
    )


def test_credentials_in_the_tracking_uri_authenticate_but_are_never_written(
    scripted: tuple[type[Scripted], int],
) -> None:
    handler, port = scripted
    handler.answer = (503, "text/plain", b"down")
    client = MlflowClient(f"http://ops:{SECRET}@127.0.0.1:{port}/", timeout=5)
    with pytest.raises(MlflowUnavailable) as caught:
        client.get_run("abc")
    assert handler.seen and handler.seen[0].startswith("Basic ")  # httpx sends the URL's user info
    assert f"MLflow at http://***@127.0.0.1:{port} could not serve" in str(caught.value)
    for written in (str(caught.value), repr(client), client.run_url("1", "abc")):
        assert SECRET not in written and "ops" not in written
    assert client.run_url("1", "abc") == f"http://127.0.0.1:{port}/#/experiments/1/runs/abc"
    with pytest.raises(ValueError) as refused:
        MlflowClient(f"ftp://ops:{SECRET}@mlflow")
    assert SECRET not in str(refused.value)


def test_a_service_that_does_not_speak_http_is_unreachable_without_its_banner() -> None:
    class Banner(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(f"SSH-2.0-OpenSSH_9.6 {SECRET}\r\n\r\n".encode())
            self.request.recv(65536)

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Banner) as server:
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
        with pytest.raises(MlflowUnavailable) as caught:
            MlflowClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=5).get_run("abc")
        server.shutdown()
    assert (
        "is unreachable (GET /api/2.0/mlflow/runs/get (run_id='abc')): it answered something that is not HTTP"
        in str(caught.value)
    )
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(("seconds", "retries"), [(0, 0), (0.4, 0), (0.5, 1), (7.5, 4), (15.5, 5), (120, 18)])
def test_a_retry_budget_in_seconds_is_a_number_of_backed_off_retries(seconds, retries):
    assert mlflow_http.retries_within(seconds) == retries


def test_an_oversized_answer_is_refused_without_reading_it_all(monkeypatch: pytest.MonkeyPatch) -> None:
    from slipway.mlflow import http

    monkeypatch.setattr(http, "MAX_ANSWER_BYTES", 1024)  # the limit, scaled down for the test
    sent_bytes: list[int] = []

    def endless() -> Iterator[bytes]:
        for _ in range(10_000):
            sent_bytes.append(512)
            yield b'{"run": {"data": {"metrics": [' + b" " * 500 + b"\n"

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    client = MlflowClient("http://mlflow:5000", transport=httpx.MockTransport(answer))
    with pytest.raises(MlflowError, match=r"answered more than 0 MiB; Slipway reads no more") as refused:
        client.get_run("0123456789abcdef")
    assert not isinstance(refused.value, MlflowUnavailable)  # not retried: the same answer would come again
    assert sum(sent_bytes) < 4096


def test_an_answer_within_the_limit_is_decoded() -> None:
    import gzip
    import json

    body = gzip.compress(json.dumps({"experiment": {"experiment_id": "7", "name": "x"}}).encode())

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-encoding": "gzip"})

    client = MlflowClient("http://mlflow:5000", transport=httpx.MockTransport(answer))
    assert client.get_or_create_experiment("x") == "7"
