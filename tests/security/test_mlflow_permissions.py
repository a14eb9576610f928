"""MLflow's own permissions, the second wall: team t2, holding its own MLflow credentials, reaches
none of team acme's runs, model versions or aliases, because MLflow itself (its basic-auth app, no
permission by default) refuses; Slipway shows that refusal on the object, naming the field; and t2's
pods run with t2's MLflow identity, the one the cluster admin named on the Namespace, never the
operator's, even where a Secret holding the operator's credentials sits in t2's namespace under the
name pods read by default.

The MLflow is a private one with authentication (the shared cluster's runs without), set up as
docs/concepts/security.md tells an MLflow admin to: one user per team and one for Slipway, each
granted its own experiments and registered models. The operator runs in single-team mode, so that
Slipway's allow-lists (the first wall, tests/security/test_sources.py) stand aside and MLflow's
permissions alone are attacked; then in multi-tenant mode, a namespace that names no MLflow
credentials gives its pods none, and the TrainingRun whose pod MLflow then refused says what is
missing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client

from localkube.mlflow_server import start_mlflow
from localkube.wait import wait_for
from slipway.mlflowcreds import MLFLOW_CREDENTIALS, missing
from slipway_testing import OperatorReplica, condition, create_as, model_artifact, report, training_run, wait_status
from slipway_testing.mlflowauth import MlflowAdmin, MlflowAs, User

pytestmark = pytest.mark.cluster

OPERATORS_SECRET = "slipway-mlflow-credentials"  # the name workload pods read by default (the setting)
T2_SECRET = "t2-mlflow"

# What a t2 pod reports: whose MLflow identity it holds, and what MLflow answers it for its own run
# and for acme's (the password as a digest: a test log carries no password).
PROBE = """
import base64, hashlib, os, urllib.error, urllib.request
url = os.environ["MLFLOW_TRACKING_URI"].rstrip("/")
user, password = os.environ.get("MLFLOW_TRACKING_USERNAME", ""), os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
def status(run_id):
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/runs/get?run_id={run_id}")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as error:
        return error.code
own, acme = status(os.environ["MLFLOW_RUN_ID"]), status(os.environ["ACME_RUN"])
print(f"probe user={user} password-sha256={hashlib.sha256(password.encode()).hexdigest()} own={own} acme={acme}")
raise SystemExit(0 if own == 200 else 3)
"""


@dataclass
class Teams:
    """acme's and t2's MLflow: acme's run, model (versions 1 and 2) and alias champion -> 1."""

    url: str
    admin: MlflowAdmin
    acme: User
    t2: User
    slipway: User  # the operator's MLflow user: granted t2's experiment and model, the namespace it serves
    acme_experiment: str
    acme_run: str
    t2_run: str
    versions: list[str]


@pytest.fixture
def teams(tmp_path) -> Iterator[Teams]:
    server = start_mlflow(tmp_path / "mlflow", auth=True)
    assert server.admin is not None
    admin = MlflowAdmin(server.url, User(*server.admin))
    try:
        acme, t2, slipway = (admin.create_user(n) for n in ("acme", "t2", "slipway"))
        acme_exp, t2_exp = admin.experiment("acme"), admin.experiment("t2")
        acme_run, t2_run = admin.run(acme_exp), admin.run(t2_exp)
        admin.model("acme-model")
        admin.model("t2-model")
        versions = [admin.version("acme-model", acme_run) for _ in range(2)]
        admin.alias("acme-model", "champion", versions[0])
        for user, experiment, model in ((acme, acme_exp, "acme-model"), (t2, t2_exp, "t2-model"),
                                        (slipway, t2_exp, "t2-model")):  # fmt: skip
            admin.grant(user, "experiment", experiment, "EDIT")
            admin.grant(user, "registered_model", model, "EDIT")
        yield Teams(server.url, admin, acme, t2, slipway, acme_exp, acme_run, t2_run, versions)
    finally:
        admin.close()
        server.stop()


def direct_attacks(teams: Teams) -> list[tuple[str, int, int]]:
    """t2's credentials against acme's MLflow objects, over MLflow's REST API: (attack, MLflow's HTTP
    status, acme objects reached). A search is answered 200 with acme's runs left out."""
    t2 = MlflowAs(teams.url, teams.t2)
    run, acme, champion = teams.acme_run, "acme-model", {"name": "acme-model", "alias": "champion"}
    try:
        own_version = {"name": acme, "source": f"runs:/{teams.t2_run}/model", "run_id": teams.t2_run}
        rows = [
            ("read acme's run (runs/get)", t2.get("/runs/get", run_id=run)),
            ("list acme's run artifacts", t2.get("/artifacts/list", run_id=run)),
            ("read acme's run metrics", t2.get("/metrics/get-history", run_id=run, metric_key="loss")),
            ("register a version of acme-model", t2.post("/model-versions/create", own_version)),
            (
                "move acme-model@champion",
                t2.post("/registered-models/alias", champion | {"version": teams.versions[1]}),
            ),
            ("delete acme-model@champion", t2.delete("/registered-models/alias", champion)),
        ]
        searched = t2.post("/runs/search", {"experiment_ids": [teams.acme_experiment]})
        found = len(t2.ok(searched).get("runs", []))
    finally:
        t2.close()
    return [(name, answer.status_code, int(answer.is_success)) for name, answer in rows] + [
        ("search acme's experiment for runs", searched.status_code, found)
    ]


def namespace_of_t2(kube_api, namespace: str, teams: Teams) -> None:
    """As the cluster admin: t2's credentials in T2_SECRET, named on the Namespace; and the operator's
    credentials in the Secret pods read by default (as an admin copying them there would leave it)."""
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_secret(namespace, teams.t2.secret(T2_SECRET))
    core.create_namespaced_secret(namespace, teams.slipway.secret(OPERATORS_SECRET))
    core.patch_namespace(namespace, {"metadata": {"annotations": {MLFLOW_CREDENTIALS: T2_SECRET}}})


def refused_source(kube_api, namespace: str, tenant, teams: Teams) -> dict:
    """A ModelArtifact of t2 whose source is acme's run: Stalled, MLflow's 403 naming the field."""
    create_as(tenant, namespace, model_artifact("steal", "t2-model", {"mlflowRun": {"runId": teams.acme_run}}))
    return wait_status(kube_api, namespace, "ModelArtifact", "steal",
                       lambda o: condition(o, "Stalled").get("status") == "True", 90, "Stalled")  # fmt: skip


def probe_pod(kube_api, namespace: str, tenant, teams: Teams) -> tuple[str, str]:
    """A TrainingRun of t2 whose pod reports its MLflow identity and MLflow's answers: (its log line,
    its Job and pods as the API server holds them, JSON)."""
    body = training_run("probe", model="t2-model", env={"ACME_RUN": teams.acme_run})
    body["spec"] |= {"command": ["python", "-c", PROBE], "args": [], "mlflow": {"experiment": "t2"},
                     "failurePolicy": {"permanentExitCodes": [3]}}  # fmt: skip
    create_as(tenant, namespace, body)
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)

    def logged() -> str | None:
        for pod in core.list_namespaced_pod(namespace, label_selector="slipway.dev/trainingrun=probe").items:
            if pod.status.phase in ("Succeeded", "Failed"):
                lines = [x for x in core.read_namespaced_pod_log(pod.metadata.name, namespace).splitlines()
                         if x.startswith("probe ")]  # fmt: skip
                return lines[-1] if lines else pod.status.phase
        return None

    line = wait_for(logged, 180, "the probe pod's report")
    pods = core.list_namespaced_pod(namespace, label_selector="slipway.dev/trainingrun=probe").items
    jobs = batch.list_namespaced_job(namespace).items
    objects = json.dumps([kube_api.sanitize_for_serialization(o) for o in [*pods, *jobs]])
    return str(line), objects


@pytest.mark.timeout(600)
def test_team_t2s_mlflow_identity_reaches_none_of_acmes_runs_models_or_aliases(
    cluster, slipway_crds, namespace, kube_api, tenant, tmp_path, teams
):
    rows = direct_attacks(teams)
    namespace_of_t2(kube_api, namespace, teams)
    env = {"SLIPWAY_MLFLOW_URL": teams.url, "MLFLOW_TRACKING_USERNAME": teams.slipway.name,
           "MLFLOW_TRACKING_PASSWORD": teams.slipway.password, "SLIPWAY_REQUIRE_MODEL_ALLOWLIST": "false"}  # fmt: skip
    replica = OperatorReplica("permissions", cluster, namespace, tmp_path, standalone=True, env=env)
    try:
        stalled = condition(refused_source(kube_api, namespace, tenant, teams), "Stalled")
        line, objects = probe_pod(kube_api, namespace, tenant, teams)
    finally:
        replica.stop()
    t2_digest = hashlib.sha256(teams.t2.password.encode()).hexdigest()
    ops_digest = hashlib.sha256(teams.slipway.password.encode()).hexdigest()
    reported = dict(word.split("=", 1) for word in line.split()[1:])
    rows += [
        ("ModelArtifact of t2, source acme's run", 403 if "HTTP 403" in stalled["message"] else 0, 0),
        ("t2's pod reads acme's run", int(reported.get("acme", 0)), 0),
        ("t2's pod holds the operator's credentials", 0, int(reported.get("password-sha256") == ops_digest)),
    ]
    versions, champion = teams.admin.versions("acme-model"), teams.admin.aliased("acme-model", "champion")
    table = [f"{'attack (team t2 against acme)':<46} {'MLflow':>6} {'reached':>7}"]
    table += [f"{name:<46} {status:>6} {reached:>7}" for name, status, reached in rows]
    table.append(f"acme-model versions {versions} (registered by t2: {len(versions) - 2}); champion -> {champion}")
    report("\n" + "\n".join(table) + f"\nThe ModelArtifact's Stalled condition: {stalled['message']}")

    assert [r for r in rows if r[2] != 0] == [], table  # every count 0
    refusals = [r for r in rows if not r[0].startswith(("search", "t2's pod holds"))]
    assert [r for r in refusals if r[1] != 403] == [], table  # refused by MLflow itself
    assert versions == teams.versions and champion == teams.versions[0]
    assert stalled["reason"] == "MlflowError", stalled
    assert stalled["message"].startswith("spec.source.mlflowRun.runId: MLflow refused Slipway's MLflow identity")
    assert teams.slipway.password not in stalled["message"] and teams.t2.password not in stalled["message"]
    # The pod ran as t2 (its own run readable, acme's refused), from the Secret the admin named alone.
    assert reported == {"user": "t2", "password-sha256": t2_digest, "own": "200", "acme": "403"}, line
    assert f'"secretRef": {{"name": "{T2_SECRET}", "optional": true}}' in objects
    assert OPERATORS_SECRET not in objects and teams.slipway.password not in objects


@pytest.mark.timeout(600)
def test_in_multi_tenant_mode_a_namespace_naming_no_credentials_gives_its_pods_none(
    cluster, slipway_crds, namespace, kube_api, tenant, tmp_path, teams
):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_secret(namespace, teams.slipway.secret(OPERATORS_SECRET))  # beside, never read
    # The MLflow admin made t2's experiment and model, not Slipway: the cluster admin opts them in.
    annotations = {"slipway.dev/allowed-models": "t2, t2-*", "slipway.dev/adopt-mlflow-names": "t2, t2-model"}
    core.patch_namespace(namespace, {"metadata": {"annotations": annotations}})
    env = {"SLIPWAY_MLFLOW_URL": teams.url, "MLFLOW_TRACKING_USERNAME": teams.slipway.name,
           "MLFLOW_TRACKING_PASSWORD": teams.slipway.password, "SLIPWAY_REQUIRE_MODEL_ALLOWLIST": "true"}  # fmt: skip
    replica = OperatorReplica("multi-tenant", cluster, namespace, tmp_path, standalone=True, env=env)
    try:
        line, objects = probe_pod(kube_api, namespace, tenant, teams)
        failed = wait_status(kube_api, namespace, "TrainingRun", "probe",
                             lambda o: condition(o, "Stalled").get("status") == "True", 90, "Stalled")  # fmt: skip
    finally:
        replica.stop()
    reported = dict(word.split("=", 1) for word in line.split()[1:])
    stalled = condition(failed, "Stalled")
    report(f"\nmulti-tenant, no {MLFLOW_CREDENTIALS}: the pod reports {line!r}\nStalled: {stalled['message']}")
    # No credentials at all: MLflow asks who it is (401), for its own run as for acme's.
    assert reported == {"user": "", "password-sha256": hashlib.sha256(b"").hexdigest(), "own": "401", "acme": "401"}
    assert '"secretRef"' not in objects and teams.slipway.password not in objects
    assert stalled["reason"] == "PermanentExitCode", stalled
    assert stalled["message"].endswith(f"create a new run; {missing(namespace)}"), stalled
    assert f"the pods of namespace {namespace} get no MLflow credentials" in stalled["message"], stalled
