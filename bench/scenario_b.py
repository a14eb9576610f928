"""Scenario B, cost at rest: N settled deployments of Slipway and of Argo Rollouts, their pods on
kwok nodes, each controller alone for a window.

``python -m bench at-rest [--out DIR] [--at-rest-sizes 10,100,300] [--at-rest-seconds 600]`` writes
``DIR/at-rest.json``:

1. A local cluster (``localkube``), Slipway's and Argo Rollouts' CRDs, ``--at-rest-kwok-nodes``
   fake nodes (``bench.kwok``: loopback addresses, never scraped by Prometheus). A counting proxy
   in front of MLflow and one in front of Prometheus (``bench.proxy.CountingProxy``); both
   controllers are given the proxies (Slipway through ``SLIPWAY_MLFLOW_URL`` and
   ``SLIPWAY_PROMETHEUS_URL``, Argo through its AnalysisTemplate's address), and a call counts for
   the controller when its connection belongs to the controller's process.
2. The model is trained once, for real (a TrainingRun with an artifact, ``bench.canary.training_run``:
   its pods run on the node agent), and its ModelArtifact becomes Validated.
3. For each N (ascending) and each system, one at a time (the other's controller stopped):
   the controller starts; objects are added up to N (namespace ``ar-slipway``:
   InferenceDeployments in Replicas mode, each ``artifactRef`` to the one ModelArtifact, one
   replica, placed on the kwok nodes through ``spec.podTemplate``; namespace ``ar-argo``: a
   Rollout of the same pod template (:func:`bench.argo.slipway_pod_template`), one replica, the
   canary strategy and background analysis of scenario A, and its Service); waits until all N are
   Ready (Slipway ``Ready=True`` at their generation; Argo phase ``Healthy``), then until settled
   (``--at-rest-quiet-seconds`` without a request other than a watch, at most
   ``--at-rest-settle-max-seconds``); then counts for ``--at-rest-seconds``: the controller's API
   requests from the audit log (by verb, and by verb and resource; writes apart), its CPU seconds
   and RSS (``/proc``, its process and children, every second), and its MLflow and Prometheus
   calls at the proxies; stops the controller.

Both controllers watch only their namespace (Slipway ``-n ar-slipway``; Argo ``--namespaced`` in
``ar-argo``), so neither sees the other's objects, which stay in place while the other runs.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import argo, kwok, memprofile, reaction, rundir
from bench.canary import THRESHOLD, Config, training_run
from bench.harness import (
    GROUP,
    IMAGE,
    ROOT,
    VERSION,
    Operator,
    create_namespace,
    describe,
    install_crds,
    is_ready,
    local_cluster,
    log,
    log_findings,
    operator_env,
    settle,
)
from bench.proxy import CountingProxy
from localkube.audit import AuditRecord, audited_kubeconfig, requests_by, summarize
from localkube.kube import Kube
from localkube.state import ClusterInfo
from localkube.wait import wait_for

SYSTEMS = ("slipway", "argo")
NAMESPACES = {"slipway": "ar-slipway", "argo": "ar-argo"}
USERS = {"slipway": "slipway-bench", "argo": argo.USER}
ARTIFACT = "digits"
TEMPLATE = "error-rate"
PORT = 8080  # no process listens on a kwok pod's address
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
TRACK_LABEL = "slipway.dev/track"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("scenario B: cost at rest, Slipway vs Argo Rollouts, pods on kwok nodes")
    g.add_argument("--at-rest-sizes", default="10,100,300", help="settled deployments per system (default 10,100,300)")
    g.add_argument("--at-rest-seconds", type=float, default=600.0, help="the counting window (default 600 s)")
    g.add_argument("--at-rest-systems", default="slipway,argo", help="which systems, in order for each size")
    g.add_argument(
        "--at-rest-kwok-nodes",
        type=int,
        default=0,
        help="kwok nodes (110 pods each; default: room for both systems' pods at the largest N)",
    )
    g.add_argument(
        "--at-rest-changes",
        type=int,
        default=50,
        help="spec changes timed per (system, N) after the window (bench.reaction; 0: none)",
    )
    g.add_argument(
        "--at-rest-startup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the changes, restart the controller and time its first pass over the N objects",
    )
    g.add_argument(
        "--at-rest-startup-rss-seconds",
        type=float,
        default=90.0,
        help="after a restart, sample the controller's RSS until this long after its start (default 90 s)",
    )
    g.add_argument(
        "--at-rest-profile",
        action="store_true",
        help="at the largest N, run Slipway again under tracemalloc, keep its top allocations (bench.memprofile)",
    )
    g.add_argument(
        "--at-rest-training-runs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Slipway: N finished TrainingRuns beside its N deployments (kwok training pods exit 0 after 5 s)",
    )
    g.add_argument("--at-rest-quiet-seconds", type=float, default=10.0, help="settled: this long without a request")
    g.add_argument("--at-rest-settle-max-seconds", type=float, default=90.0, help="count after this long anyway")
    g.add_argument("--at-rest-keep-cluster-dir", action="store_true", help="keep the stopped cluster's directory")


class ArgoSetup(Config):
    @property
    def name(self) -> str:
        return NAMESPACES["argo"]


def object_path(system: str, plural: str, name: str | None = None) -> str:
    ns = NAMESPACES[system]
    if plural == "services":
        base = f"/api/v1/namespaces/{ns}/services"
    elif system == "argo":
        return argo.path(ns, plural, name)
    else:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def deployment_name(i: int) -> str:
    return f"d-{i:03d}"


def slipway_spec() -> dict[str, Any]:
    """One InferenceDeployment's spec: the Validated artifact, one replica on a kwok node, the
    default canary settings (the analysis metrics included)."""
    placement = kwok.placement()
    return {
        "model": {"artifactRef": {"name": ARTIFACT}},
        "image": IMAGE,
        "command": ["python", "-m", "slipway.workloads.serve"],
        "port": PORT,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 1},
        "podTemplate": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
    }


def training_name(i: int) -> str:
    return f"t-{i:03d}"


def training_object(i: int) -> dict[str, Any]:
    """A TrainingRun that finishes: its pod on a kwok node, 1 GPU, exits 0 (kwok's stage) and stays,
    as a finished run's Job and pod stay in a cluster."""
    placement = kwok.placement()
    spec = {
        "model": {"name": "at-rest-runs"},
        "image": IMAGE,
        "command": ["python", "-m", "slipway.workloads.train"],
        "resources": {"gpus": 1, "cpu": "1", "memory": "1Gi"},
        "nodeSelector": placement["nodeSelector"],
        "tolerations": placement["tolerations"],
    }
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingRun", "metadata": {"name": training_name(i)},
            "spec": spec}  # fmt: skip


def count_finished(kube: Kube) -> tuple[int, int]:
    """(Succeeded, all) of Slipway's TrainingRuns in its namespace, the seed run aside."""
    items = [o for o in kube.get(object_path("slipway", "trainingruns"))["items"] if o["metadata"]["name"] != "digits"]
    return sum(1 for o in items if (o.get("status") or {}).get("phase") == "Succeeded"), len(items)


def slipway_object(i: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceDeployment",
            "metadata": {"name": deployment_name(i)}, "spec": slipway_spec()}  # fmt: skip


class Argo:
    """The Argo side: the AnalysisTemplate once, then per deployment a Service and a Rollout."""

    def __init__(self, kube: Kube, model: str, version: str, mlflow_url: str, prometheus_url: str) -> None:
        self.kube, self.model, self.version, self.mlflow_url = kube, model, version, mlflow_url
        ns = NAMESPACES["argo"]
        query = ArgoSetup("10s", 1, PORT).error_ratio_query("{{args.version}}")  # scenario A's, in this namespace
        template = argo.analysis_template(TEMPLATE, query, "10s", 1, THRESHOLD, prometheus_url)
        kube.create(argo.path(ns, "analysistemplates"), template)

    def objects(self, i: int) -> list[tuple[str, dict[str, Any]]]:
        name, ns = deployment_name(i), NAMESPACES["argo"]
        selector = {"slipway.dev/deployment": name}
        template = argo.slipway_pod_template(slipway_spec(), name, ns, self.model, self.version, self.mlflow_url)
        analysis = {"templates": [{"templateName": TEMPLATE}], "startingStep": 1,
                    "args": [{"name": "version", "value": self.version}]}  # fmt: skip
        steps = [{"setWeight": 33}, {"pause": {"duration": "5m"}}]
        rollout = argo.rollout(name, template, selector, 1, steps, analysis, canary_labels={TRACK_LABEL: "canary"},
                               stable_labels={TRACK_LABEL: "stable"})  # fmt: skip
        return [(object_path("argo", "services"), argo.service(name, selector, PORT)),
                (object_path("argo", "rollouts"), rollout)]  # fmt: skip


# --------------------------------------------------------------------------- waiting


def count_ready(kube: Kube, system: str) -> tuple[int, int, list[str]]:
    """(ready, total, a few not-ready descriptions) of the system's deployments."""
    plural = "inferencedeployments" if system == "slipway" else "rollouts"
    items = kube.get(object_path(system, plural))["items"]
    ok = [o for o in items if (is_ready(o) if system == "slipway" else argo.is_healthy(o, 1))]
    bad = [o for o in items if o not in ok][:3]
    return len(ok), len(items), [f"{o['metadata']['name']}: {describe(o)}" for o in bad]


def request_rows(records: list[AuditRecord], limit: int = 400) -> list[dict[str, Any]]:
    return [{"time": r.time.isoformat(), "key": r.key, "namespace": r.namespace, "name": r.name, "code": r.code}
            for r in records[:limit]]  # fmt: skip


# --------------------------------------------------------------------------- one measurement


class Controllers:
    """Slipway's operator and Argo's controller: start one, stop the other."""

    def __init__(self, info: ClusterInfo, run_dir: Path, mlflow: CountingProxy, prometheus: CountingProxy) -> None:
        self.info, self.mlflow, self.prometheus = info, mlflow, prometheus
        env = operator_env(ROOT, audited_kubeconfig(info, USERS["slipway"]), mlflow.url, prometheus.url, {})
        self.slipway = Operator(ROOT, env, [NAMESPACES["slipway"]], run_dir / "at-rest-slipway-operator.log")
        self.imported_from = self.slipway.check_import()
        self.argo = argo.Controller(info, run_dir / "at-rest-argo", log_name="../at-rest-argo-rollouts.log",
                                    namespace=NAMESPACES["argo"])  # fmt: skip

    def pid(self, system: str) -> int | None:
        return self.slipway.pid if system == "slipway" else self.argo.pid

    def alive(self, system: str) -> bool:
        return self.slipway.alive() if system == "slipway" else self.argo.alive()

    def start(self, system: str) -> None:
        self.stop("argo" if system == "slipway" else "slipway")
        if system == "slipway":
            if not self.slipway.alive():
                self.slipway.start()
        else:
            self.argo.start()
        for proxy in (self.mlflow, self.prometheus):
            proxy.operator_pid = self.pid(system)

    def stop(self, system: str) -> None:
        if system == "slipway":
            self.slipway.stop()
        else:
            self.argo.stop()

    def restart(self, system: str) -> None:
        self.stop(system)
        self.start(system)

    def metrics_url(self, system: str) -> str:
        if system == "slipway":
            return f"http://127.0.0.1:{self.slipway.env['SLIPWAY_METRICS_PORT']}/metrics"
        return f"http://127.0.0.1:{self.argo.metrics_port}/metrics"


def measure(
    info: ClusterInfo, admin: Kube, controllers: Controllers, system: str, n: int, args: argparse.Namespace,
    create: Any, created: dict[str, int],
) -> dict[str, Any]:  # fmt: skip
    user = USERS[system]
    out: dict[str, Any] = {"system": system, "n": n, "notes": []}
    t0 = time.monotonic()
    controllers.start(system)
    out["controller_started"] = time.time()
    for i in range(created[system], n):
        for collection, body in create(i):
            admin.create(collection, body)
    added = n - created[system]
    created[system] = n
    out["added"] = added
    timeout = 120 + 2.0 * n
    last: dict[str, Any] = {}

    runs = system == "slipway" and args.at_rest_training_runs
    if runs:
        out["training_runs"] = n

    def all_ready() -> bool:
        if not controllers.alive(system):
            raise SystemExit(f"the {system} controller exited")
        ready, total, bad = count_ready(admin, system)
        last.update(ready=ready, total=total, bad=bad)
        if runs:
            last["training_runs"] = count_finished(admin)
            if last["training_runs"] != (n, n):
                return False
        return ready == total == n

    try:
        wait_for(all_ready, timeout, f"{n} {system} deployments ready", interval=2)
    except TimeoutError:
        raise TimeoutError(
            f"{system}: {last.get('ready')}/{n} ready after {timeout:.0f} s: {last.get('bad')}; TrainingRuns "
            f"Succeeded/all {last.get('training_runs')}"
        ) from None
    out["ready_seconds"] = round(time.monotonic() - t0, 1)
    out["settle"] = settle(info, user, args.at_rest_quiet_seconds, args.at_rest_settle_max_seconds)
    out["settle_seconds"] = round(time.monotonic() - t0, 1)
    if not out["settle"]["quiet"]:
        out["notes"].append(f"not quiet after {args.at_rest_settle_max_seconds:.0f} s of settling: counted anyway")
    log(
        f"{system} n={n}: ready after {out['ready_seconds']} s, settle {out['settle']}; "
        f"counting {args.at_rest_seconds:.0f} s"
    )

    pid = controllers.pid(system)
    assert pid is not None
    sampler = argo.ProcSampler(pid, period=1.0).start()
    start = datetime.now(UTC)
    end = start + timedelta(seconds=args.at_rest_seconds)
    while datetime.now(UTC) < end:
        if not controllers.alive(system):
            raise SystemExit(f"the {system} controller exited during the window")
        time.sleep(min(1.0, max(0.0, (end - datetime.now(UTC)).total_seconds())))
    usage = sampler.stop()
    time.sleep(1.5)  # the last requests' audit events land
    records = requests_by(info, user, start, end)
    non_watch = [r for r in records if r.verb != "watch"]
    writes = [r for r in records if r.verb in WRITE_VERBS]
    minutes = args.at_rest_seconds / 60.0
    mlflow_calls = [c for c in controllers.mlflow.calls(start, end) if c.origin == "operator"]
    prom_calls = [c for c in controllers.prometheus.calls(start, end) if c.origin == "operator"]
    ready, total, bad = count_ready(admin, system)
    pods = admin.get(f"/api/v1/namespaces/{NAMESPACES[system]}/pods")["items"]
    nodes = [
        str((p.get("spec") or {}).get("nodeName") or "")
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
    ]
    placed = Counter("kwok" if node.startswith(kwok.NODE_PREFIX) else "other" for node in nodes)
    out.update({
        "running_pods": dict(placed),
        "window": {"start": start.isoformat(), "end": end.isoformat()},
        "requests_by_verb": dict(sorted(Counter(r.verb for r in records).items())),
        "requests_by_verb_resource": summarize(records),
        "seconds": args.at_rest_seconds,
        "requests": len(records),
        "requests_non_watch": len(non_watch),
        "writes": len(writes),
        "writes_by_verb_resource": summarize(writes),
        "requests_per_minute": round(len(records) / minutes, 3),
        "requests_per_minute_per_object": round(len(records) / minutes / n, 4),
        "requests_non_watch_per_minute": round(len(non_watch) / minutes, 3),
        "watches_started": sum(1 for r in records if r.verb == "watch"),
        "cpu_seconds": usage["cpu_seconds"],
        "cpu_seconds_per_minute": round(usage["cpu_seconds"] / minutes, 3),
        "rss_bytes_max": usage["rss_bytes_max"],
        "rss_bytes_end": usage["rss_bytes_end"],
        "rss_bytes_start": usage["rss_bytes_start"],
        "samples": [(round(t, 2), round(c, 3), r) for t, c, r in sampler.samples],
        "prometheus_calls": len(prom_calls),
        "mlflow_calls": len(mlflow_calls),
        "mlflow_by_path": dict(Counter(f"{c.method} {c.path}" for c in mlflow_calls)),
        "prometheus_by_path": dict(Counter(f"{c.method} {c.path}" for c in prom_calls)),
        "still_ready_after": {"ready": ready, "total": total, "not_ready": bad},
        "request_log": request_rows(non_watch),
        "load_average_end": list(os.getloadavg()),
    })  # fmt: skip
    if ready != n:
        out["notes"].append(f"{n - ready} of {n} no longer ready after the window: {bad}")
    ns = NAMESPACES[system]
    if args.at_rest_changes > 0:
        names = [deployment_name(i) for i in range(n)]
        out["spec_changes"] = reaction.spec_changes(admin, system, ns, names, args.at_rest_changes)
    if args.at_rest_startup:
        # the last change's own writes are done before the restart, so that the start-up counts only its own
        out["settle_before_startup"] = settle(info, user, args.at_rest_quiet_seconds, args.at_rest_settle_max_seconds)
        out["startup"] = reaction.startup(
            info, system, user, ns, {deployment_name(i) for i in range(n)},
            restart=lambda: controllers.restart(system), metrics_url=lambda: controllers.metrics_url(system),
            alive=lambda: controllers.alive(system), timeout=300 + 0.1 * n, pid=lambda: controllers.pid(system),
            rss_seconds=args.at_rest_startup_rss_seconds,
        )  # fmt: skip
        fresh = controllers.pid(system)
        out["rss_bytes_after_startup"] = argo.rss_bytes(fresh) if fresh else None
    if placed.get("other") or placed.get("kwok", 0) < n:
        out["notes"].append(f"running pods: {dict(placed)} (expected {n} on kwok nodes, none elsewhere)")
    log(f"{system} n={n}: {out['requests_per_minute']} req/min ({out['writes']} writes), "
        f"cpu {usage['cpu_seconds']} s, rss max {usage['rss_bytes_max'] / 2**20:.0f} MiB, "
        f"mlflow {len(mlflow_calls)}, prometheus {len(prom_calls)}")  # fmt: skip
    return out


# --------------------------------------------------------------------------- the run


def train_artifact(admin: Kube, controllers: Controllers, timeout: float = 600) -> dict[str, Any]:
    """The TrainingRun of bench/canary.py (pods on the node agent, for real), until its ModelArtifact is Ready."""
    controllers.start("slipway")
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACES['slipway']}"
    admin.create(f"{base}/trainingruns", training_run())
    last: dict[str, Any] = {}

    def done() -> bool:
        if not controllers.alive("slipway"):
            raise SystemExit("the Slipway operator exited while training")
        last["run"] = admin.get_or_none(f"{base}/trainingruns/digits")
        last["artifact"] = admin.get_or_none(f"{base}/modelartifacts/{ARTIFACT}")
        return all(o is not None and is_ready(o) for o in last.values()) and len(last) == 2

    try:
        wait_for(done, timeout, "the TrainingRun and its ModelArtifact Ready", interval=2)
    except TimeoutError:
        states = "; ".join(f"{k}: {describe(o)}" for k, o in last.items())
        raise TimeoutError(f"not Ready within {timeout:.0f} s: {states}") from None
    return last["artifact"]


def run(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    sizes = sorted({int(x) for x in str(args.at_rest_sizes).split(",") if x.strip()})
    systems = [s.strip() for s in args.at_rest_systems.split(",") if s.strip()]
    if not sizes or any(s not in SYSTEMS for s in systems):
        raise SystemExit(f"--at-rest-sizes takes numbers, --at-rest-systems {', '.join(SYSTEMS)}")
    data: dict[str, Any] = {
        "scenario": "B",
        "window_seconds": args.at_rest_seconds,
        "sizes": sizes,
        "systems": systems,
        "runs": [],
        "notes": [
            "requests_by_verb counts every request of the controller's user received in the window (audit log), "
            "watches included (a watch counts once, when it starts), as do requests and requests_per_minute; "
            "requests_non_watch leaves them out; writes are create/update/patch/delete/deletecollection",
            "each system alone: the other's controller is stopped during the window; both watch only their namespace "
            "(Slipway -n ar-slipway, Argo --namespaced in ar-argo), so the other's objects, which stay, are not seen",
            "the controller is (re)started before its objects are added up to N, so each window follows a start and "
            "the creation of N - previous N objects, then Ready, then settled",
            "Slipway's namespace also holds the TrainingRun and ModelArtifact the deployments serve (trained once, "
            "for real); every InferenceDeployment has an HPA (min = max = 1), as Slipway always makes one",
            "Argo's Rollouts have no HPA; their AnalysisTemplate points at the Prometheus proxy (no AnalysisRun "
            "runs at rest)",
            f"Argo Rollouts {argo.VERSION}: its default rollout resync is 15 min (--rollout-resync 900), longer than "
            "a window shorter than 15 min",
        ],
        "config": {
            "kwok_nodes": args.at_rest_kwok_nodes,
            "quiet_seconds": args.at_rest_quiet_seconds,
            "settle_max_seconds": args.at_rest_settle_max_seconds,
            "slipway_spec": slipway_spec(),
            "users": USERS,
            "namespaces": NAMESPACES,
        },
    }
    if args.at_rest_seconds < 600:
        data["notes"].append(f"window {args.at_rest_seconds:.0f} s per (system, N), not the 10 minutes issue #13 asks: "
                             "chosen to fit the time of the run")  # fmt: skip
    started = time.time()
    controllers: Controllers | None = None
    proxies: list[CountingProxy] = []
    try:
        with local_cluster(args.at_rest_keep_cluster_dir, prefix="slipway-bench-b-") as info:
            assert info.mlflow_url and info.prometheus_url
            admin = Kube(info.kubeconfig)
            install_crds(admin, ROOT / "crds")
            argo.install_crds(admin)
            for ns in NAMESPACES.values():
                create_namespace(admin, ns)
            mlflow = CountingProxy("mlflow", info.mlflow_url).start()
            prometheus = CountingProxy("prometheus", info.prometheus_url).start()
            proxies += [mlflow, prometheus]
            try:
                nodes = args.at_rest_kwok_nodes or 2 + -(-2 * max(sizes) // 100)
                data["config"]["kwok_nodes"] = nodes
                train = 5.0 if args.at_rest_training_runs else 30.0
                with kwok.running(info, nodes, run_dir / "at-rest-kwok", train_seconds=train) as fake:
                    data["kwok_nodes"] = fake.names
                    controllers = Controllers(info, run_dir, mlflow, prometheus)
                    data["slipway_imported_from"] = controllers.imported_from
                    t0 = time.monotonic()
                    artifact = train_artifact(admin, controllers)
                    status = artifact.get("status") or {}
                    model = (artifact["spec"].get("model") or {}).get("name") or "digits"
                    data["artifact"] = {
                        "name": ARTIFACT, "model": model, "version": status.get("modelVersion"),
                        "uri": status.get("uri"), "seconds": round(time.monotonic() - t0, 1),
                    }  # fmt: skip
                    log(f"artifact {data['artifact']}")
                    argo_side = Argo(admin, str(model), str(status.get("modelVersion")), mlflow.url,
                                     prometheus.url)  # fmt: skip
                    runs = args.at_rest_training_runs

                    def slipway_objects(i: int) -> list[tuple[str, dict[str, Any]]]:
                        made = [(object_path("slipway", "inferencedeployments"), slipway_object(i))]
                        return made + ([(object_path("slipway", "trainingruns"), training_object(i))] if runs else [])

                    creators = {"slipway": slipway_objects, "argo": argo_side.objects}
                    created = dict.fromkeys(SYSTEMS, 0)
                    for n in sizes:
                        for system in systems:
                            try:
                                data["runs"].append(
                                    measure(info, admin, controllers, system, n, args, creators[system], created)
                                )
                            except (Exception, SystemExit) as exc:  # the other sizes and system still run
                                error = f"{type(exc).__name__}: {exc}"[:2000]
                                data["runs"].append({"system": system, "n": n, "error": error, "notes": [error]})
                                log(f"{system} n={n} failed: {exc}")
                            finally:
                                controllers.stop(system)
                            rundir.write(run_dir, "at-rest", data)
                    if args.at_rest_profile and "slipway" in systems:
                        controllers.stop("argo")
                        controllers.stop("slipway")
                        names = {deployment_name(i) for i in range(sizes[-1])}
                        data["profile"] = memprofile.profile(controllers.slipway.env, NAMESPACES["slipway"], names,
                                                             run_dir)  # fmt: skip
                        rundir.write(run_dir, "at-rest", data)
            finally:
                if controllers is not None:
                    controllers.stop("slipway")
                    controllers.stop("argo")
                for proxy in proxies:
                    proxy.stop()
    finally:
        data["wall_seconds"] = round(time.time() - started, 1)
        if controllers is not None:
            data["slipway_log"] = log_findings(controllers.slipway.log_path) | {
                "path": controllers.slipway.log_path.name
            }
            data["argo_log"] = {"path": "at-rest-argo-rollouts.log", "starts": controllers.argo.starts}
        rundir.write(run_dir, "at-rest", data)
    for row in data["runs"]:
        if "error" in row:
            print(f"{row['system']:8} n={row['n']:4}: FAILED {row['error']}")
            continue
        print(f"{row['system']:8} n={row['n']:4}: {row['requests_per_minute']:8.2f} req/min, {row['writes']} writes, "
              f"cpu {row['cpu_seconds']:.2f} s, rss max {row['rss_bytes_max'] / 2**20:.0f} MiB, "
              f"mlflow {row['mlflow_calls']}, prometheus {row['prometheus_calls']}")  # fmt: skip
    print(f"written {run_dir / 'at-rest.json'}")
    return data
