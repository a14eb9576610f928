"""kubectl slipway talks to the API server through kubectl: its errors read back as statuses, API paths,
a watch's stream decoded however it arrives, and the connection (kubectl, kubeconfig, namespace) with a
stand-in kubectl that records what it was asked."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from slipway.cli import client
from slipway.cli.cache import decode_stream
from slipway.cli.client import ApiError, Failure, Kubectl, Session, api_error, api_failure, collection_path
from slipway.cli.refs import INFERENCE_DEPLOYMENT as IDEP


@pytest.mark.parametrize(
    "stderr, status, message",
    [
        (
            'Error from server (NotFound): inferencedeployments.slipway.dev "nope" not found',
            404,
            'inferencedeployments.slipway.dev "nope" not found',
        ),
        (
            "Error from server (NotFound): the server could not find the requested resource",
            404,
            "the server could not find the requested resource",
        ),
        (
            'Error from server (Forbidden): inferencedeployments.slipway.dev is forbidden: User "u" cannot list',
            403,
            'inferencedeployments.slipway.dev is forbidden: User "u" cannot list',
        ),
        (
            'Error from server (Conflict): Operation cannot be fulfilled on x "d": the object has been modified',
            409,
            'Operation cannot be fulfilled on x "d": the object has been modified',
        ),
        ("Error from server (Expired): too old resource version: 1 (2)", 410, "too old resource version: 1 (2)"),
        (
            "error: You must be logged in to the server (Unauthorized)",
            401,
            "You must be logged in to the server (Unauthorized)",
        ),
        (
            "The connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?",
            None,
            "The connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?",
        ),
        # Warnings before the error are not the error.
        ("Warning: v1 ComponentStatus is deprecated\nError from server (InternalError): boom", 500, "boom"),
        ("", None, "kubectl failed and printed nothing"),
    ],
)
def test_kubectls_errors_read_back_as_statuses(stderr: str, status: int | None, message: str):
    error = api_error(stderr)
    assert (error.status, error.message) == (status, message)


SESSION = Session(Kubectl(("kubectl",)), "team-a")


@pytest.mark.parametrize(
    "error, text",
    [
        (
            ApiError(404, 'inferencedeployments.slipway.dev "nope" not found'),
            "promote nope: InferenceDeployment team-a/nope not found; check the name and -n/--namespace "
            "(kubectl get inferencedeployments -n team-a lists them)",
        ),
        (
            ApiError(404, "the server could not find the requested resource"),
            "promote nope: the API server does not serve inferencedeployments.slipway.dev/v1alpha1: are the Slipway "
            "CRDs installed",
        ),
        (
            ApiError(403, "forbidden"),
            "the API server refused (403: forbidden); your kubeconfig's user needs RBAC "
            "for inferencedeployments in namespace team-a",
        ),
        (
            ApiError(None, "The connection to the server x was refused"),
            "promote nope: no answer from the API server (The connection to the server x was refused); check "
            "--kubeconfig and --context",
        ),
        (ApiError(500, "boom"), "promote nope: the API server answered 500: boom"),
    ],
)
def test_api_failures_say_what_to_do(error: ApiError, text: str):
    assert text in str(api_failure(error, "promote nope", SESSION, IDEP))


@pytest.mark.parametrize(
    "args, query, path",
    [
        (
            ("slipway.dev/v1alpha1", "inferencedeployments", "team-a"),
            {},
            "/apis/slipway.dev/v1alpha1/namespaces/team-a/inferencedeployments",
        ),
        (
            ("slipway.dev/v1alpha1", "trainingruns", None),
            {"fieldSelector": ""},
            "/apis/slipway.dev/v1alpha1/trainingruns",
        ),
        (
            ("v1", "events", "team-a"),
            {"fieldSelector": "involvedObject.kind=InferenceDeployment,involvedObject.name=d"},
            "/api/v1/namespaces/team-a/events?fieldSelector=involvedObject.kind%3DInferenceDeployment%2C"
            "involvedObject.name%3Dd",
        ),
        (
            ("apps/v1", "deployments", None),
            {"labelSelector": "app.kubernetes.io/name=slipway"},
            "/apis/apps/v1/deployments?labelSelector=app.kubernetes.io%2Fname%3Dslipway",
        ),
    ],
)
def test_api_paths(args, query, path):
    assert collection_path(*args, **query) == path


EVENTS = [
    {"type": "ADDED", "object": {"metadata": {"name": "é", "resourceVersion": "1"}}},
    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "2"}}},
]


@pytest.mark.parametrize("size", [1, 2, 7, 64, 100000])
def test_a_watch_stream_is_decoded_however_its_bytes_arrive(size: int):
    raw = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in EVENTS).encode()
    chunks = [raw[i : i + size] for i in range(0, len(raw), size)]  # splits inside objects and characters
    assert list(decode_stream(chunks)) == EVENTS


def test_objects_without_newlines_between_them_are_decoded_too():
    assert list(decode_stream([b'{"a": 1}{"b"', b": 2} "])) == [{"a": 1}, {"b": 2}]


# -- the connection, with a stand-in kubectl --------------------------------------------------------------


@pytest.fixture
def fake_kubectl(tmp_path: Path) -> Path:
    """A kubectl that logs its arguments and answers `config view` with the context's namespace
    (or fails as kubectl does for an unknown context), and `get --raw` with a canned list."""
    script = tmp_path / "kubectl"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls
case "$*" in
  *"--context nope"*) echo "error: cannot locate context nope" >&2; exit 1 ;;
  *"config view"*) printf 'team-b' ;;
  *"get --raw"*) printf '{{"items": [], "metadata": {{"resourceVersion": "7"}}}}' ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_connect_uses_kubectl_with_the_flags_and_the_contexts_namespace(fake_kubectl, tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\n")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    session = client.connect(str(config), "ctx", None, which=lambda name: str(fake_kubectl))
    assert session.namespace == "team-b"
    assert session.kubectl.command == (str(fake_kubectl), "--kubeconfig", str(config), "--context", "ctx")
    assert client.list_kind(session, IDEP, "listing") == ([], "7")
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].endswith("config view --minify -o jsonpath={.contexts[0].context.namespace}")
    assert calls[1].endswith("get --raw /apis/slipway.dev/v1alpha1/namespaces/team-b/inferencedeployments")
    assert all(c.startswith(f"--kubeconfig {config} --context ctx --request-timeout=30s ") for c in calls)
    assert client.connect(str(config), None, "team-c", which=lambda name: str(fake_kubectl)).namespace == "team-c"


def test_connect_says_what_is_missing(fake_kubectl, tmp_path, monkeypatch):
    with pytest.raises(Failure, match="kubectl is not on PATH"):
        client.connect(None, None, None, which=lambda name: None)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(Failure, match=f"no kubeconfig at {tmp_path / 'a'}"):
        client.connect(None, None, None, which=lambda name: str(fake_kubectl))
    (tmp_path / "b").write_text("apiVersion: v1\n")
    with pytest.raises(Failure, match="cannot use the kubeconfig .*: cannot locate context nope; set KUBECONFIG"):
        client.connect(None, "nope", None, which=lambda name: str(fake_kubectl))
