"""``make demo``: the whole lifecycle on the local cluster, live.

Starts (or reuses) the local cluster with MLflow and Prometheus, deploys the
operator from manifests/, applies samples/ — a TrainingRun whose artifact is
quantized to int8 and validated, and an InferenceDeployment following the MLflow
alias ``candidate`` — and shows each resource's phase until the model serves in
production. Then two bad models: one that serves 30% errors (it passes the
gates, so the canary analysis must roll it back) and one trained on shuffled
labels (the accuracy gate must reject it). It ends with a summary.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from typing import Any

import yaml
from kubernetes import client

from localkube.cluster import ClusterConfig, up
from localkube.kube import api_client, condition
from localkube.state import DEFAULT_DIR, ClusterInfo
from slipway.mlflow import MlflowClient, model_version_filter
from slipway_e2e.deploy import ROOT, deploy_operator, kubectl
from slipway_e2e.lifecycle import Timeline, list_all, row, table
from slipway_e2e.loadgen import LoadDriver

NAMESPACE = "demo"
SAMPLES = ROOT / "samples"
MODEL = "digits"


def log(timeline: Timeline, message: str) -> None:
    print(f"[{timeline.elapsed():6.1f}s] {message}", flush=True)


def cluster_ready(timeline: Timeline) -> ClusterInfo:
    running = ClusterInfo.load(DEFAULT_DIR)
    if running is not None and running.healthy():
        log(timeline, f"reusing the local cluster in {DEFAULT_DIR}")
        return running
    log(timeline, "starting the local cluster (control plane, node agent, MLflow, Prometheus)")
    return up(ClusterConfig(directory=DEFAULT_DIR))


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((SAMPLES / name).read_text())  # type: ignore[no-any-return]


def bad_training(name: str, env: dict[str, str]) -> dict[str, Any]:
    """The sample TrainingRun under another name, with a fault switch in its environment."""
    body = copy.deepcopy(sample("trainingrun-digits.yaml"))
    body["metadata"] = {"name": name}
    body["spec"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return body


class Demo:
    def __init__(self, cluster: ClusterInfo, timeline: Timeline) -> None:
        self.cluster, self.timeline = cluster, timeline
        self.api = api_client(cluster.kubeconfig)
        self.custom = client.CustomObjectsApi(self.api)
        self.last_table = ""

    def apply(self, body: dict[str, Any]) -> None:
        path = self.cluster.directory / f"demo-{body['metadata']['name']}-{body['kind'].lower()}.yaml"
        path.write_text(yaml.safe_dump(body))
        kubectl(self.cluster, "-n", NAMESPACE, "apply", "-f", str(path))

    def show(self) -> list[dict[str, Any]]:
        objects = list_all(self.api, NAMESPACE)
        self.timeline.observe(objects)
        text = table([row(o) for o in objects])
        if text != self.last_table:
            print(f"\n[{self.timeline.elapsed():6.1f}s]\n{text}", flush=True)
            self.last_table = text
        return objects

    def until(self, done: Any, timeout: float, what: str) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            objects = self.show()
            if done(objects):
                return objects
            time.sleep(1)  # the demo's refresh interval
        raise TimeoutError(f"{what}: not reached within {timeout:.0f}s")

    def find(self, objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
        return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), {})


def run(keep_load: bool = False) -> int:
    timeline = Timeline()
    cluster = cluster_ready(timeline)
    log(timeline, "deploying the operator from manifests/ (kubectl apply -k, its own ServiceAccount and RBAC)")
    deploy_operator(cluster)
    demo = Demo(cluster, timeline)
    log(timeline, f"creating namespace {NAMESPACE} from samples/namespace.yaml (its models allowed, pods restricted)")
    kubectl(cluster, "apply", "-f", str(SAMPLES / "namespace.yaml"))
    log(timeline, f"applying samples/ to namespace {NAMESPACE}")
    demo.apply(sample("trainingrun-digits.yaml"))
    demo.apply(sample("inferencedeployment-digits.yaml"))
    load = LoadDriver.for_service(demo.api, NAMESPACE, "digits", rate=20, max_duration=1800)
    load.start()
    try:

        def serving_first(objects: list[dict[str, Any]]) -> bool:
            artifact = demo.find(objects, "ModelArtifact", "digits")
            idep = demo.find(objects, "InferenceDeployment", "digits")
            version = (artifact.get("status") or {}).get("quantizedVersion")
            stable = ((idep.get("status") or {}).get("stable") or {}).get("modelVersion")
            return bool(version) and stable == version and idep["status"].get("phase") == "Promoted"

        demo.until(serving_first, 600, "the first model in production")
        log(timeline, "the first model serves in production; now a model that serves 30% errors")
        demo.apply(bad_training("digits-faulty", {"SLIPWAY_SERVE_FAULT_ERROR_RATE": "0.3"}))

        def faulty_rolled_back(objects: list[dict[str, Any]]) -> bool:
            artifact = demo.find(objects, "ModelArtifact", "digits-faulty")
            idep = demo.find(objects, "InferenceDeployment", "digits")
            version = (artifact.get("status") or {}).get("quantizedVersion")
            last = (idep.get("status") or {}).get("lastRollback") or {}
            return bool(version) and last.get("modelVersion") == version

        demo.until(faulty_rolled_back, 600, "the faulty model rolled back")
        log(timeline, "rolled back by the canary analysis; now a model trained on shuffled labels")
        demo.apply(bad_training("digits-inaccurate", {"SLIPWAY_BAD_MODEL": "1"}))
        demo.until(
            lambda objs: (
                (demo.find(objs, "ModelArtifact", "digits-inaccurate").get("status") or {}).get("phase")
                in ("Rejected", "Validated")
            ),
            600,
            "the inaccurate model decided",
        )
        objects = demo.show()
    finally:
        if not keep_load:
            load.stop()
    print(summary(cluster, demo, objects, timeline))
    return 0


def summary(cluster: ClusterInfo, demo: Demo, objects: list[dict[str, Any]], timeline: Timeline) -> str:
    at = timeline.at
    lines = ["", "=" * 78, "Slipway demo: summary", "=" * 78, "", "Time per stage (seconds since the demo started):"]
    stages = [
        ("training (TrainingRun digits)", at("TrainingRun", "digits", "Succeeded")),
        ("registered, quantized int8, validated", at("ModelArtifact", "digits", "Validated")),
        ("first model serving in production", at("InferenceDeployment", "digits", "Promoted")),
        ("faulty model trained and validated", at("ModelArtifact", "digits-faulty", "Validated")),
        ("faulty canary rolled back", at("InferenceDeployment", "digits", "RolledBack")),
        ("inaccurate model rejected by a gate", at("ModelArtifact", "digits-inaccurate", "Rejected")),
    ]
    lines += [f"  {name:<42} {t:7.1f}" if t is not None else f"  {name:<42}   (not seen)" for name, t in stages]
    lines += [f"  {'whole demo':<42} {timeline.elapsed():7.1f}", "", "MLflow model versions of 'digits':"]
    with MlflowClient(cluster.mlflow_url or "") as mlflow:
        versions = mlflow.search_model_versions(model_version_filter(MODEL))
        model = mlflow.get_registered_model(MODEL)
        for v in sorted(versions, key=lambda v: int(v.version)):
            aliases = [a for a, ver in model.aliases.items() if ver == v.version]
            role = v.tags.get("slipway.dev/role", "")
            method = v.tags.get("slipway.dev/quantization-method", "")
            decision = v.tags.get("slipway.dev/validation", "")
            rollback = " rolled back" if v.tags.get("slipway.dev/rollback") else ""
            owner = v.tags.get("slipway.dev/modelartifact", "")
            lines.append(
                f"  v{v.version:<3} {owner:<24} {role:<9} {method:<13} {decision:<9}{rollback}"
                f"  aliases: {', '.join(aliases) or '-'}"
            )
    lines += ["", "Gates:"]
    for obj in objects:
        if obj["kind"] != "ModelArtifact":
            continue
        for gate in (obj.get("status") or {}).get("gates") or []:
            value = gate.get("value")
            lines.append(
                f"  {obj['metadata']['name']:<18} {gate['metric']:<18} "
                f"{'n/a' if value is None else f'{value:.6g}':>10}  {gate['threshold']:<28} "
                f"{'passed' if gate['passed'] else 'FAILED'}"
            )
    idep = demo.find(objects, "InferenceDeployment", "digits")
    last = (idep.get("status") or {}).get("lastRollback")
    if last:
        lines += [
            "",
            f"Last rollback: version {last.get('modelVersion')}, {last.get('reason')}, "
            f"{last.get('metric', '')}={last.get('value', '')}",
            f"  {condition(idep, 'Ready').get('message', '')}",
        ]
    kubeconfig = cluster.kubeconfig
    lines += [
        "",
        "Look further:",
        f"  export KUBECONFIG={kubeconfig} PATH={ROOT / '.cache' / 'controlplane'}:$PATH",
        f"  kubectl get slipway -n {NAMESPACE}",
        f"  kubectl describe inferencedeployment digits -n {NAMESPACE}",
        f"  kubectl get events -n {NAMESPACE} --sort-by=.lastTimestamp",
        f"  kubectl logs -n {NAMESPACE} job/digits-train          (-f follows, --previous, -c <init container>)",
        f"  kubectl top pods -n {NAMESPACE}                        (metrics-server, as the HPA reads it)",
        f"  MLflow UI:   {cluster.mlflow_url}",
        f"  Prometheus:  {cluster.prometheus_url}  (e.g. rate(slipway_requests_total[1m]))",
        "  make demo-down   stops the cluster",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slipway_e2e.demo", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    try:
        return run()
    except TimeoutError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
