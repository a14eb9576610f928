"""A password holding '/', '#' or '?' in the operator's MLflow URL, and failures with tracebacks:
the password shows in no log line (kopf's own traceback of a failed start included), no status and
no Event. Typed as is, such a URL is refused at start naming the flag (an HTTP client read part of
the password as the port and quoted it in its error); percent-encoded, it works and is redacted."""

from __future__ import annotations

import json
import logging

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway_testing import OperatorReplica, condition, create_as, events_for, model_artifact, report, wait_status

pytestmark = pytest.mark.cluster

PASSWORD = "s3cr/et#1?x"
PIECES = (PASSWORD, "s3cr", "et#1?x", "s3cr%2Fet")  # whole, either side of the '/', encoded


def with_password(url: str, password: str) -> str:
    return url.replace("http://", f"http://slipway:{password}@", 1)


def leaked(text: str) -> list[str]:
    return [piece for piece in PIECES if piece in text]


def occurrences(where: str, text: str) -> None:
    """The measured count, for the log (run with -s): the password's pieces in ``text``."""
    report(f"\nsecret occurrences in {where} ({len(text)} characters): {sum(text.count(p) for p in PIECES)}")


def test_a_password_with_a_slash_is_refused_at_start_and_kopfs_traceback_does_not_show_it(
    cluster, namespace, operator, caplog
):
    caplog.set_level(logging.DEBUG)  # every record of the operator (in-process), kopf's own included
    operator(mlflow_url=with_password(cluster.mlflow_url, PASSWORD))
    wait_for(lambda: "Traceback" in caplog.text and "--mlflow-url 'http://***@" in caplog.text, 60,
             "kopf's startup failure logged, with its traceback")  # fmt: skip
    assert "percent-encode" in caplog.text
    occurrences("the in-process operator's log, kopf's traceback included", caplog.text)
    assert leaked(caplog.text) == []


def test_the_operator_process_refuses_it_at_start_naming_the_flag(cluster, namespace, tmp_path):
    env = {"SLIPWAY_MLFLOW_URL": with_password(cluster.mlflow_url, PASSWORD)}
    replica = OperatorReplica("refused", cluster, namespace, tmp_path, standalone=True, env=env)
    try:
        assert replica.proc.wait(60) == 2  # argparse's usage error
    finally:
        replica.stop()
    log = replica.log()
    occurrences("the python -m slipway process's log", log)
    assert "--mlflow-url 'http://***@" in log and "percent-encode" in log, log
    assert leaked(log) == [], log


def test_a_percent_encoded_password_with_a_slash_works_and_shows_nowhere(
    cluster, kube_api, namespace, operator, tenant, caplog
):
    caplog.set_level(logging.DEBUG)
    operator(mlflow_url=with_password(cluster.mlflow_url, "s3cr%2Fet%231%3Fx"))  # MLflow without auth ignores it
    # A source run MLflow does not know: the pass asks MLflow, and fails on its answer.
    create_as(tenant, namespace, model_artifact("no-run", f"m-{namespace}", {"mlflowRun": {"runId": "0" * 32}}))
    failed = lambda o: condition(o, "Stalled").get("reason") == "MlflowError"  # noqa: E731
    obj = wait_status(kube_api, namespace, "ModelArtifact", "no-run", failed, 60, "the missing run reported")
    wait_for(lambda: "://***@" in caplog.text, 30, "the HTTP clients' request lines logged, redacted")
    seen = {
        "status": json.dumps(obj["status"]),
        "events": json.dumps(events_for(kube_api, namespace, "no-run")),
        "log": caplog.text,
    }
    for where, text in seen.items():
        occurrences(where, text)
    assert {where: leaked(text) for where, text in seen.items() if leaked(text)} == {}
    assert client.BatchV1Api(kube_api).list_namespaced_job(namespace).items == []
