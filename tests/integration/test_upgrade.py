"""Upgrades with work in flight (install.md's upgrade guide): the previous release's CRDs and
operator (slipway_testing.upgrades.PREVIOUS) hold a TrainingRun mid-training, a ModelArtifact
mid-validation, an InferenceDeployment mid-canary (after an abort: status.lastRollback) and one
mid-bake (status.previousStable); the current CRDs are applied server-side, the old operator stops
and the current one starts. No serving pod restarts, no canary starts, every durable decision is
kept, and each piece of work finishes once: one Job, one MLflow run, one model version. Then the
same from the current release to the previous one, with the current CRDs kept: nothing restarts and
every decision the previous release knows is kept; status.lastRollback.tag (read back by a re-created
object), which it does not know, survives its writes only with the current status writer; and no
spec field it does not know is written into stored objects by a CRD default
(slipway_testing.upgrades.PREVIOUS_REFUSES), so it carries every object to its end."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localkube.kube import Kube
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, model_version_filter, tag_filter
from slipway_testing import (
    ROOT,
    Versions,
    apply_object,
    get_object,
    inference_deployment,
    install_priority_classes,
    model_artifact,
    patch_object,
    report,
    training_run,
    wait_status,
)
from slipway_testing.processes import OperatorReplica
from slipway_testing.upgrades import (
    NEWER_FIELDS,
    PREVIOUS,
    PREVIOUS_KEEPS_NEWER_FIELDS,
    PREVIOUS_REFUSES,
    Snapshot,
    apply_crds,
    passes,
    previous_tree,
    start_operator,
)

# It applies the previous release's CRDs to the cluster (cluster-wide): no other test may run then.
pytestmark = [pytest.mark.cluster, pytest.mark.serial, pytest.mark.timeout(1500)]

KINDS = {"canary": "InferenceDeployment", "bake": "InferenceDeployment", "train": "TrainingRun",
         "check": "ModelArtifact"}  # fmt: skip


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> Path:
    return previous_tree(tmp_path_factory.mktemp("previous-release"))


@pytest.fixture(scope="module")
def previous_with_current_writer(tmp_path_factory) -> Path:
    """The previous release with the current status writer: what a patch release of it would be."""
    tree = previous_tree(tmp_path_factory.mktemp("previous-patched"))
    writer = Path("operator/slipway/status/writer.py")
    shutil.copyfile(ROOT / writer, tree / writer)
    return tree


def serving_spec(name: str, model: str, **rollout: Any) -> dict[str, Any]:
    """One pod following ``model``'s `candidate`, fetched by an init container (modelLoad: the fetch
    image, which changed between the releases, must roll nothing)."""
    return inference_deployment(name, model, modelLoad={}, rollout=rollout)


def status(api, namespace: str, name: str, kind: str = "InferenceDeployment") -> dict[str, Any]:
    return get_object(api, namespace, kind, name).get("status") or {}


def track(api, namespace: str, name: str, which: str) -> dict[str, Any]:
    return status(api, namespace, name).get(which) or {}


def mid_canary(api, namespace: str, versions: Versions) -> str:
    """`canary` serving v1, v2 aborted (lastRollback), v3's canary up and held at 50% for 30 minutes."""
    v1 = versions.publish()
    apply_object(api, namespace, serving_spec("canary", versions.model, steps=[{"weight": 50, "pause": "30m"}]))
    wait_status(api, namespace, "InferenceDeployment", "canary",
                lambda o: (o.get("status") or {}).get("phase") == "Promoted", 180, f"canary: v{v1} served")  # fmt: skip
    v2 = versions.publish()
    wait_for(lambda: track(api, namespace, "canary", "canary").get("modelVersion") == v2, 120, f"canary of v{v2}")
    patch_object(api, namespace, "InferenceDeployment", "canary",
                 {"metadata": {"annotations": {"slipway.dev/abort": "true"}}})  # fmt: skip
    wait_for(lambda: (status(api, namespace, "canary").get("lastRollback") or {}).get("modelVersion") == v2, 60,
             f"v{v2} aborted")  # fmt: skip
    v3 = versions.publish()
    wait_for(lambda: (track(api, namespace, "canary", "canary").get("modelVersion") == v3
                      and (track(api, namespace, "canary", "canary").get("readyReplicas") or 0) >= 1), 120,
             f"the canary of v{v3} ready")  # fmt: skip
    return v3


def mid_bake(api, namespace: str, versions: Versions) -> str:
    """`bake` serving b1, then b2 promoted and baking for 30 minutes (previousStable: b1)."""
    analysis = {"interval": "5s", "failureLimit": 1, "noData": "pass", "metrics": [{"name": "errorRate", "max": 0.05}]}
    b1 = versions.publish()
    body = serving_spec("bake", versions.model, steps=[{"weight": 50, "pause": "1s"}], analysis=analysis,
                        bake={"duration": "30m"})  # fmt: skip
    apply_object(api, namespace, body)
    wait_status(api, namespace, "InferenceDeployment", "bake",
                lambda o: (o.get("status") or {}).get("phase") == "Promoted", 180, f"bake: v{b1} served")  # fmt: skip
    b2 = versions.publish()
    stable = lambda: track(api, namespace, "bake", "stable")  # noqa: E731
    wait_for(lambda: status(api, namespace, "bake").get("phase") == "Baking" and stable().get("modelVersion") == b2
             and (stable().get("readyReplicas") or 0) >= 1, 180, f"v{b2} baking")  # fmt: skip
    return b2


def restored(api, namespace: str, mlflow: MlflowClient, trained: str) -> str:
    """`restored`, a re-created object (no status) whose alias names a version MLflow records as rolled
    back: the current operator serves production and keeps the tag in status.lastRollback.tag."""
    versions = Versions(mlflow, f"restored-{namespace}", trained)
    r1 = versions.publish()
    mlflow.set_alias(versions.model, "production", r1)
    r2 = versions.publish()
    tag = f"deployment={namespace}/restored, reason=Aborted, revision=before-the-restore, time=2026-12-01T00:00:00Z"
    mlflow.set_model_version_tag(versions.model, r2, "slipway.dev/rollback", tag)
    apply_object(api, namespace, serving_spec("restored", versions.model, steps=[{"weight": 50, "pause": "30m"}]))
    wait_for(lambda: (status(api, namespace, "restored").get("lastRollback") or {}).get("tag") == tag
             and track(api, namespace, "restored", "stable").get("modelVersion") == r1, 120,
             "restored: production served, the rollback tag read back")  # fmt: skip
    return tag


def put_work_in_flight(api, namespace: str, mlflow: MlflowClient, trained: str, cluster) -> dict[str, str]:
    """The four objects, each left where the release crosses it; the model names by object."""
    from slipway_testing import train_run

    models = {name: f"{name}-{namespace}" for name in KINDS}
    run = train_run(cluster.mlflow_url, models["check"])  # before: the validation is short, it goes last
    mid_canary(api, namespace, Versions(mlflow, models["canary"], trained))
    mid_bake(api, namespace, Versions(mlflow, models["bake"], trained))
    gates = {"gates": [{"metric": "accuracy", "min": 0.5}]}
    body = training_run("train", steps=60, env={"SLIPWAY_STEP_SECONDS": "1"}, model=models["train"],
                        artifact={"validation": gates})  # fmt: skip
    apply_object(api, namespace, body)
    step = lambda o: ((o.get("status") or {}).get("progress") or {}).get("step", 0)  # noqa: E731
    wait_status(api, namespace, "TrainingRun", "train", lambda o: step(o) >= 2, 180, "train: step 2")
    apply_object(api, namespace, model_artifact("check", models["check"], {"mlflowRun": {"runId": run}},
                                                validation=gates))  # fmt: skip
    wait_status(api, namespace, "ModelArtifact", "check",
                lambda o: (o.get("status") or {}).get("phase") == "Validating", 120, "check: validating")  # fmt: skip
    return models


def cross(api, namespace: str, cluster, logs: Path, then: Path | None, crds: Path | None,
          extra: tuple[str, ...] = ()) -> tuple[dict[str, Snapshot], dict[str, Snapshot], OperatorReplica]:  # fmt: skip
    """The release crossing, the objects where they are and the old operator stopped: the install
    guide's steps (the CRDs of ``crds`` server-side first, if any, then the operator ``then``
    started), then two passes of every object. The objects before and after, and the new operator."""
    names = (*KINDS, *extra)
    kinds = {**KINDS, **{name: "InferenceDeployment" for name in extra}}
    before = {name: Snapshot(api, namespace, kinds[name], name) for name in names}
    if crds is not None:
        apply_crds(cluster, crds)
    new = start_operator(cluster, namespace, logs, then, "then")
    start = passes(new)
    wait_for(lambda: passes(new) >= start + 2 * len(names), 120, "two passes of every object by the new operator")
    after = {name: Snapshot(api, namespace, kinds[name], name) for name in names}
    return before, after, new


def finish(
    api, namespace: str, mlflow: MlflowClient, models: dict[str, str], refused: tuple[str, ...] = ()
) -> dict[str, str]:
    """Each piece of work carried to its end under the new operator, counted: Jobs, MLflow runs and
    model versions (one each), the canary promoted with no other canary, the bake ended; unless the
    operator refuses the bake's spec for the ``refused`` fields: then it is Stalled naming them."""
    batch = client.BatchV1Api(api)
    canary_before = Snapshot(api, namespace, "InferenceDeployment", "canary").canaries
    patch_object(api, namespace, "InferenceDeployment", "canary",
                 {"metadata": {"annotations": {"slipway.dev/promote": "true"}}})  # fmt: skip
    patch_object(api, namespace, "InferenceDeployment", "bake", {"spec": {"rollout": {"bake": {"duration": "5s"}}}})
    outcome: dict[str, str] = {}
    if refused:
        outcome["bake"] = stalled_by(api, namespace, "bake", refused)
    for name in ("canary", "bake")[: 1 if refused else 2]:
        done = wait_status(api, namespace, "InferenceDeployment", name,
                           lambda o: (o.get("status") or {}).get("phase") == "Promoted", 240, "promoted")  # fmt: skip
        outcome[name] = f"Promoted v{done['status']['stable']['modelVersion']}"
    started = Snapshot(api, namespace, "InferenceDeployment", "canary").canaries - canary_before
    assert not {v for _, v in started} - {v for _, v in canary_before}, f"another canary started: {started}"
    ended = lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed")  # noqa: E731
    train = wait_status(api, namespace, "TrainingRun", "train", ended, 300, "finished")
    assert train["status"]["phase"] == "Succeeded", train["status"]
    for name in ("train", "check"):
        artifact = wait_status(api, namespace, "ModelArtifact", name,
                               lambda o: (o.get("status") or {}).get("phase") in ("Validated", "Rejected", "Failed"),
                               300, "decided")  # fmt: skip
        assert artifact["status"]["phase"] == "Validated", artifact["status"]
        jobs = batch.list_namespaced_job(namespace, label_selector=f"slipway.dev/modelartifact={name}").items
        versions = mlflow.search_model_versions(model_version_filter(models[name]))
        runs = mlflow.search_runs([mlflow.get_or_create_experiment(models[name])],
                                  filter=tag_filter("slipway.dev/modelartifact", f"{namespace}/{name}"))  # fmt: skip
        assert (len(jobs), len(versions), len(runs)) == (1, 1, 1), (name, [j.metadata.name for j in jobs], versions)
        outcome[name] = f"Validated v{artifact['status']['modelVersion']}: 1 Job, 1 run, 1 version"
    jobs = batch.list_namespaced_job(namespace, label_selector="slipway.dev/trainingrun=train").items
    runs = mlflow.search_runs([mlflow.get_or_create_experiment(models["train"])],
                              filter=tag_filter("slipway.dev/uid", train["metadata"]["uid"]))  # fmt: skip
    assert (len(jobs), len(runs)) == (1, 1), ([j.metadata.name for j in jobs], runs)
    outcome["train"] = f"Succeeded: 1 Job, 1 run; its artifact {outcome['train']}"
    return outcome


def stalled_by(api, namespace: str, name: str, fields: tuple[str, ...]) -> str:
    def says() -> str | None:
        ready = [c for c in status(api, namespace, name).get("conditions") or [] if c["type"] == "Ready"]
        message = ready[0].get("message", "") if ready else ""
        return message if all(f"{f}: Extra inputs are not permitted" in message for f in fields) else None

    message = wait_for(says, 60, f"{name} refused for {fields}")
    return f"Stalled: {message.split(': ', 1)[1]}"


def table(title: str, before: dict[str, Snapshot], after: dict[str, Snapshot], outcome: dict[str, str],
          ignoring: dict[str, tuple[str, ...]] | None = None) -> str:  # fmt: skip
    rows = [f"\n{title}", f"{'object':<28} {'phase at crossing':<18} {'pods restarted':>14} {'canaries':>9} "
            f"{'decisions kept':<15} outcome"]  # fmt: skip
    for name, then in before.items():
        now = after[name]
        lost = then.kept(now)
        if lost and not then.kept(now, ignoring):
            lost = [f"{k}.{f}" for k in lost for f in (ignoring or {}).get(k, ())]
        rows.append(f"{then.kind + '/' + name:<28} {then.phase or '-':<18} {then.restarted(now):>14} "
                    f"{then.canaries_started(now):>9} {'all' if not lost else 'LOST ' + ','.join(lost):<15} "
                    f"{outcome.get(name, '-')}")  # fmt: skip
    return "\n".join(rows)


def check_crossing(before: dict[str, Snapshot], after: dict[str, Snapshot],
                   ignoring: dict[str, tuple[str, ...]] | None = None) -> None:  # fmt: skip
    for name, then in before.items():
        now = after[name]
        assert then.restarted(now) == 0, f"{name}: serving pods restarted: {then.pods} then {now.pods}"
        assert then.canaries_started(now) == 0, f"{name}: canaries {then.canaries} then {now.canaries}"
        assert not then.kept(now, ignoring), f"{name}: decisions {then.decisions} then {now.decisions}"
        assert now.phase == then.phase or then.kind != "InferenceDeployment", f"{name}: {then.phase} -> {now.phase}"


def prepare(api, namespace: str, cluster) -> None:
    """What an install gives: Slipway's PriorityClasses; the namespace enforcing restricted pods."""
    install_priority_classes(Kube(cluster.kubeconfig))
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": labels}})


def test_an_upgrade_with_work_in_flight_restarts_nothing_and_finishes_everything_once(
    kube_api, namespace, cluster, mlflow, trained, previous, tmp_path
):
    prepare(kube_api, namespace, cluster)
    apply_crds(cluster, previous / "crds")
    old = start_operator(cluster, namespace, tmp_path, previous, "previous")
    try:
        models = put_work_in_flight(kube_api, namespace, mlflow, trained, cluster)
    finally:
        old.stop()
    before, after, new = cross(kube_api, namespace, cluster, tmp_path, None, ROOT / "crds")
    outcome: dict[str, str] = {}
    try:
        report(table(f"upgrade {PREVIOUS} -> current, at the crossing", before, after, outcome))
        check_crossing(before, after)
        outcome = finish(kube_api, namespace, mlflow, models)
        report(table(f"upgrade {PREVIOUS} -> current", before, after, outcome))
    finally:
        new.stop()


@pytest.mark.parametrize("writer", ["previous", "current"])
def test_a_downgrade_with_work_in_flight_keeps_the_fields_the_older_operator_does_not_know(
    kube_api, namespace, cluster, mlflow, trained, request, tmp_path, writer
):
    """``writer``: the previous release as it is, or with the current status writer."""
    previous = request.getfixturevalue("previous" if writer == "previous" else "previous_with_current_writer")
    prepare(kube_api, namespace, cluster)
    apply_crds(cluster, ROOT / "crds")
    current = start_operator(cluster, namespace, tmp_path, None, "current")
    try:
        tag = restored(kube_api, namespace, mlflow, trained)
        models = put_work_in_flight(kube_api, namespace, mlflow, trained, cluster)
    finally:
        current.stop()
    # The CRDs stay the current ones: a newer schema holds every field the previous release writes.
    before, after, old = cross(kube_api, namespace, cluster, tmp_path, previous, None, extra=("restored",))
    outcome: dict[str, str] = {}
    try:
        title = f"downgrade current -> {PREVIOUS}{' with the current status writer' if writer == 'current' else ''}"
        report(table(f"{title}, at the crossing", before, after, outcome, NEWER_FIELDS))
        # Every decision the previous release knows is kept, the refusal of the rolled-back version too.
        check_crossing(before, after, NEWER_FIELDS)
        kept = (status(kube_api, namespace, "restored").get("lastRollback") or {}).get("tag")
        outcome = finish(kube_api, namespace, mlflow, models, PREVIOUS_REFUSES)
        outcome["restored"] = f"{after['restored'].phase}, lastRollback.tag {'kept' if kept == tag else 'LOST'}"
        report(table(title, before, after, outcome, NEWER_FIELDS))
        # The field it does not know: kept by a release with the current status writer, not by PREVIOUS.
        keeps = writer == "current" or PREVIOUS_KEEPS_NEWER_FIELDS
        assert (kept == tag) is keeps, status(kube_api, namespace, "restored")
    finally:
        old.stop()
