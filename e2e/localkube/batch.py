"""The local cluster's batch system: Kueue (quotas, admission, preemption) and JobSet (gangs of
Jobs), each its upstream controller built from the Go module proxy by ``e2e/batch/build.sh``
(``make kueue``, ``make jobset``) and run as a local process, started when a test or the demo
asks for it (:func:`ensure_kueue`, :func:`ensure_jobset`).

Their admission and conversion webhooks are served to the local API server for real: the
webhook configurations and CRDs of their releases, with each ``clientConfig`` pointed at
``https://127.0.0.1:<port>`` (the process, not a Service: nothing here routes a Service's IP)
and a serving certificate issued by the cluster's CA. Webhooks of integrations that are not
enabled are left out (Kueue would not serve them, and with ``failurePolicy: Fail`` every pod or
Deployment create would fail). Kueue's plain-pod integration is on, for serving pods that a
quota accounts (``kueue.x-k8s.io/queue-name`` in an InferenceDeployment's
``spec.podTemplate.labels``); its pod webhooks are sent only pods with that label (an
``objectSelector`` added here), so every other pod is created without a call to Kueue, and a
LocalQueue named ``default`` does not take a namespace's unlabelled pods. Each runs as its own user with the
ClusterRole of its release.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localkube import bootstrap
from localkube.kube import Kube, component_kubeconfig
from localkube.mlflow_server import free_port
from localkube.nodeagent.runtime import PODEXEC
from localkube.pki import CertificateAuthority
from localkube.procs import Proc, spawn
from localkube.state import ROOT, ClusterInfo
from localkube.wait import wait_answers

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class Ports:
    webhook: int
    health: int
    metrics: int
    api: int  # an aggregated API server's (Kueue's visibility API)


@dataclass(frozen=True)
class Component:
    name: str  # the process name in state.json, the user's suffix, the make target
    binary: Path
    webhook_paths: tuple[str, ...]  # webhooks kept: those whose path contains one of these
    namespace: str  # where the controller keeps its own objects (leases, secrets)
    settings: Callable[[Path, Ports], dict[str, Any]]  # (cert dir, ports) -> its configuration file
    cert_mounts: tuple[str, ...] = ()  # where the release mounts its certificate Secrets
    aggregated_api: tuple[str, tuple[str, ...]] | None = None  # (group, versions) it serves
    webhook_overrides: tuple[tuple[str, dict[str, Any]], ...] = ()  # (webhook name, fields set on it)

    def args(self, directory: Path, ports: Ports) -> list[str]:
        """The process's arguments, its configuration file written into ``directory``."""
        path = directory / f"{self.name}-config.yaml"
        path.write_text(yaml.safe_dump(self.settings(directory, ports)))
        return [f"--config={path}"] + ([f"--visibility-server-port={ports.api}"] if self.aggregated_api else [])

    def digest(self) -> str:
        """What a running process was started with, but its ports and paths: a change (a new
        integration, a webhook's selector) starts it again."""
        what = [self.settings(Path("/"), Ports(0, 0, 0, 0)), self.webhook_paths, self.webhook_overrides]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    @property
    def user(self) -> str:
        return f"localkube:{self.name}"

    @property
    def config_dir(self) -> Path:
        return self.binary.parent / "config"


def _kueue_settings(directory: Path, ports: Ports) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE.namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"port": ports.webhook, "host": "127.0.0.1", "certDir": str(directory)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        # Kueue's default: a preempted (evicted) Workload waits, then is admitted again.
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "pod"]},
    }


def _jobset_settings(directory: Path, ports: Ports) -> dict[str, Any]:
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"port": ports.webhook, "host": "127.0.0.1", "certDir": str(directory)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
QUEUED_PODS = {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}
KUEUE = Component(
    "kueue",
    ROOT / ".cache" / "kueue" / "kueue",
    ("kueue-x-k8s-io", "batch-v1-job", "jobset-x-k8s-io", "--v1-pod"),
    "kueue-system",
    _kueue_settings,
    # Without internal cert management Kueue reads its metrics and visibility server's
    # certificates from these fixed paths.
    ("/etc/kueue/metrics/certs", "/visibility"),
    ("visibility.kueue.x-k8s.io", ("v1beta1", "v1beta2")),
    (("mpod.kb.io", {"objectSelector": QUEUED_PODS}), ("vpod.kb.io", {"objectSelector": QUEUED_PODS})),
)
JOBSET = Component(
    "jobset", ROOT / ".cache" / "jobset" / "jobset", ("jobset-x-k8s-io", "--v1-pod"), "jobset-system", _jobset_settings
)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for f in sorted(path.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _point_at(client_config: dict[str, Any], port: int, ca_bundle: str) -> dict[str, Any]:
    """A webhook's clientConfig aimed at the local process instead of the release's Service."""
    path = (client_config.get("service") or {}).get("path", "/")
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}


def _webhook_patches(directory: Path) -> dict[str, dict[str, Any]]:
    """What the release's kustomization changes in its webhooks (namespace and object selectors):
    webhook name -> fields, from its inline strategic-merge patches and its JSON patches that
    replace a whole webhook."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    out: dict[str, dict[str, Any]] = {}
    for entry in kustomization.get("patches") or []:
        if "patch" in entry:
            for hook in (yaml.safe_load(entry["patch"]) or {}).get("webhooks") or []:
                out.setdefault(hook["name"], {}).update(hook)
        elif "path" in entry:
            for op in yaml.safe_load((directory / entry["path"]).read_text()) or []:
                if op.get("op") == "replace" and isinstance(op.get("value"), dict) and "name" in op["value"]:
                    out[op["value"]["name"]] = dict(op["value"])
    return out


def webhook_configurations(component: Component, port: int, ca_bundle: str) -> list[dict[str, Any]]:
    """The release's webhook configurations as its kustomization renders them, cut to the enabled
    webhooks, aimed at ``port``."""
    directory = component.config_dir / "webhook"
    patches = _webhook_patches(directory)
    out = []
    for doc in yaml.safe_load_all((directory / "manifests.yaml").read_text()):
        if not doc or not doc.get("kind", "").endswith("WebhookConfiguration"):
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"{component.name}-{doc['metadata']['name']}"}
        kept = []
        for hook in doc.get("webhooks") or []:
            hook = {**hook, **patches.get(hook["name"], {}), **dict(component.webhook_overrides).get(hook["name"], {})}
            path = (hook["clientConfig"].get("service") or {}).get("path", "")
            if any(p in path for p in component.webhook_paths):
                hook["clientConfig"] = _point_at(hook["clientConfig"], port, ca_bundle)
                kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out


def crds(component: Component, port: int, ca_bundle: str) -> list[dict[str, Any]]:
    """The release's CRDs; those with more than one served version convert through the process."""
    docs = [d for d in _docs(component.config_dir / "crd" / "bases") if d.get("kind") == "CustomResourceDefinition"]
    for doc in docs:
        if sum(1 for v in doc["spec"]["versions"] if v.get("served", True)) > 1:
            doc["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": _point_at({"service": {"path": "/convert"}}, port, ca_bundle),
                    "conversionReviewVersions": ["v1"],
                },
            }
    return docs


def namespaced_role(doc: dict[str, Any], name: str, namespace: str, user: str) -> list[tuple[str, dict[str, object]]]:
    """A release's Role ``doc`` as ``name`` in ``namespace``, and its RoleBinding to ``user``."""
    role = {**doc, "metadata": {"name": name, "namespace": namespace}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return [(f"{bootstrap.RBAC}/namespaces/{namespace}/roles", role),
            (f"{bootstrap.RBAC}/namespaces/{namespace}/rolebindings", binding)]  # fmt: skip


def rbac(component: Component) -> list[tuple[str, dict[str, object]]]:
    """The release's manager ClusterRole (``rbac/role.yaml``) and its Roles in its own namespace
    (secrets), bound to the component's user; an aggregated API server's delegation too."""
    rules: list[dict[str, object]] = []
    for doc in yaml.safe_load_all((component.config_dir / "rbac" / "role.yaml").read_text()):
        if doc and doc.get("kind") == "ClusterRole":
            rules += doc.get("rules") or []
    out = bootstrap.cluster_role(component.user, component.user, rules)
    namespace = component.namespace
    for file in sorted((component.config_dir / "rbac").glob("*.yaml")):
        for doc in yaml.safe_load_all(file.read_text()):
            if not doc or doc.get("kind") != "Role" or "leader" in doc["metadata"]["name"]:
                continue
            out += namespaced_role(doc, f"{component.name}-{doc['metadata']['name']}", namespace, component.user)
    if component.aggregated_api is not None:
        out += bootstrap.aggregated_api_server(component.user)
    return out


def _running(info: ClusterInfo, name: str) -> Proc | None:
    proc = next((p for p in info.processes if p.name == name), None)
    return proc if proc is not None and proc.alive() else None


def ensure(component: Component, directory: Path, timeout: float = 90) -> ClusterInfo:
    """Start ``component`` in the cluster of ``directory`` unless it runs: its CRDs, RBAC and
    webhook configurations first, then the process; returns once it answers ``/readyz`` and the
    API server reaches its webhooks."""
    info = ClusterInfo.load(directory)
    if info is None:
        raise FileNotFoundError(f"no cluster recorded in {directory}")
    digest = component.digest()
    stamp = directory / component.name / "digest"
    running = _running(info, component.name)
    if running is not None:
        if stamp.exists() and stamp.read_text() == digest:
            return info
        running.stop()  # started with other settings (an earlier checkout): start it again with these
    if not component.binary.exists():
        raise FileNotFoundError(f"{component.binary} is missing: run `make {component.name}` first")
    kube = Kube(info.kubeconfig)
    ca = CertificateAuthority.load(info.pki)
    certs = directory / component.name / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    service = f"{component.name}-api"  # the aggregated API's Service (kube-system), see register_aggregated_api
    pair = ca.issue(f"{component.name}-webhook", f"{component.name}-webhook", server=True,
                    dns_names=("localhost", f"{service}.kube-system.svc"), ip_addresses=("127.0.0.1",))  # fmt: skip
    (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
    (certs / "tls.key").write_bytes(pair.key.read_bytes())
    bundle = base64.b64encode(ca.pair.cert.read_bytes()).decode()
    ports = Ports(free_port(), free_port(), free_port(), free_port())

    kube.ensure("/api/v1/namespaces", {"metadata": {"name": component.namespace}})
    for path, obj in rbac(component):
        _put(kube, path, obj)
    bootstrap.apply_crds(kube, crds(component, ports.webhook, bundle), field_manager=f"localkube-{component.name}")
    kubeconfig = component_kubeconfig(directory, info.apiserver_url, ca, component.name, component.user)
    args = component.args(certs, ports)
    env = {"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "",
           "POD_NAMESPACE": component.namespace}  # fmt: skip
    argv = [str(component.binary), f"--kubeconfig={kubeconfig}", *args]
    # Started as the node agent starts a container (podexec: a private mount namespace), so the
    # certificates appear at the paths the release mounts them on, as they would in its pod.
    mounts = [{"source": str(certs), "target": target, "readOnly": True} for target in component.cert_mounts]
    spec = {"argv": argv, "env": {**os.environ, **env}, "cwd": str(directory), "mounts": mounts}
    spec_file = directory / component.name / "process.json"
    spec_file.write_text(json.dumps(spec))
    cmd = [sys.executable, "-I", "-S", str(PODEXEC), str(spec_file)]
    log = directory / "logs" / f"{component.name}.log"
    proc = spawn(component.name, cmd, log, env=env, cwd=directory)
    info.record([proc])
    stamp.write_text(digest)

    wait_answers(f"http://127.0.0.1:{ports.health}/readyz", proc.alive, log, timeout, component.name)
    # Webhook configurations only once the process serves them: with failurePolicy Fail they
    # would otherwise refuse every Job created meanwhile.
    for doc in webhook_configurations(component, ports.webhook, bundle):
        _put(kube, f"{WEBHOOKS}/{doc['kind'].lower()}s", doc)
    if component.aggregated_api is not None:
        group, versions = component.aggregated_api
        bootstrap.register_aggregated_api(kube, service, ports.api, ca.pair.cert.read_text(), group, list(versions))
    return info


def _put(kube: Kube, collection: str, obj: dict[str, Any]) -> None:
    """Create ``obj`` in ``collection``, or replace what is there (a restart's new port or CA)."""
    name = obj["metadata"]["name"]
    existing = kube.get_or_none(f"{collection}/{name}")
    if existing is None:
        kube.create(collection, obj)
    else:
        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": existing["metadata"]["resourceVersion"]}}
        kube.request("PUT", f"{collection}/{name}", body)


def ensure_kueue(directory: Path, timeout: float = 90) -> ClusterInfo:
    """Kueue, with JobSet started first: Kueue's JobSet integration starts only once JobSet's API is
    served, and Kueue started before it notices that only at its next look, a minute or two later."""
    ensure_jobset(directory, timeout)
    return ensure(KUEUE, directory, timeout)


def ensure_jobset(directory: Path, timeout: float = 90) -> ClusterInfo:
    return ensure(JOBSET, directory, timeout)


KUEUE_API = "kueue.x-k8s.io/v1beta2"


def _cluster_queue(name: str, namespace: str, flavor: str, gpus: int, cpu: int, memory: str,
                   **spec: Any) -> dict[str, Any]:  # fmt: skip
    resources = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory},
                 {"name": "nvidia.com/gpu", "nominalQuota": gpus}]  # fmt: skip
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                "flavors": [{"name": flavor, "resources": resources}]}],
            **spec,
        },
    }  # fmt: skip


def _flavor(name: str) -> tuple[str, dict[str, Any]]:
    return ("resourceflavors", {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name}})


def _local_queue(name: str, namespace: str, cluster_queue: str) -> tuple[str, dict[str, Any]]:
    meta = {"name": name, "namespace": namespace}
    return ("localqueues", {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": meta,
                            "spec": {"clusterQueue": cluster_queue}})  # fmt: skip


def gpu_quota(
    namespace: str, gpus: int, cpu: int = 64, memory: str = "256Gi", queue: str = "gpus"
) -> list[tuple[str, dict[str, Any]]]:
    """(plural, object) in the order of creation: a ResourceFlavor and a ClusterQueue ``cq-<namespace>``
    of ``gpus`` GPUs (with ``cpu`` and ``memory``: Kueue admits only what its quota covers) open to
    ``namespace`` alone, a lower priority preempted within it, and the LocalQueue ``queue`` there."""
    flavor, name = f"gpu-{namespace}", f"cq-{namespace}"
    queue_obj = _cluster_queue(
        name, namespace, flavor, gpus, cpu, memory, preemption={"withinClusterQueue": "LowerPriority"}
    )
    return [_flavor(flavor), ("clusterqueues", queue_obj), _local_queue(queue, namespace, name)]


def serving_first_cohort(
    namespace: str, gpus: int, cpu: int = 64, memory: str = "256Gi"
) -> list[tuple[str, dict[str, Any]]]:
    """Serving quota-accounted and always first, as README's TrainingRun section sets it up:
    (plural, object) in the order of creation. A cohort ``cohort-<namespace>`` of two ClusterQueues:
    ``cq-<namespace>-serving`` holds the ``gpus`` GPUs as nominal quota and takes back what
    training borrowed (``reclaimWithinCohort: Any``); ``cq-<namespace>-training`` has none of its
    own and borrows what serving does not use. LocalQueues ``serving`` and ``training``."""
    flavor, cohort = f"gpu-{namespace}", f"cohort-{namespace}"
    serving, training = f"cq-{namespace}-serving", f"cq-{namespace}-training"
    return [
        _flavor(flavor),
        ("clusterqueues", _cluster_queue(serving, namespace, flavor, gpus, cpu, memory, cohortName=cohort,
                                         preemption={"reclaimWithinCohort": "Any"})),
        ("clusterqueues", _cluster_queue(training, namespace, flavor, 0, cpu, memory, cohortName=cohort)),
        _local_queue("serving", namespace, serving),
        _local_queue("training", namespace, training),
    ]  # fmt: skip
