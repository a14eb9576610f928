"""The Helm chart charts/slipway, beside kustomize's manifests/.

Without a cluster: `helm lint` is clean, and `helm template` renders what each value says
(replicas, the URLs, the -n flags and the RBAC narrowed to the watched namespaces, the
PriorityClasses toggle, the credentials Secret's name, the pod's securityContext), and the same
kinds and names as `kubectl kustomize manifests/`.

On the local cluster: the rendered objects pass the API server's dry run; `kubectl apply -k`
installs in one pass; `helm install` rolls the operator out and it writes status under the
chart's RBAC; the aggregated user roles let an `edit` user create InferenceDeployments and a
`view` user only read them; `helm uninstall` leaves no operator pod.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from localkube.state import ClusterInfo
from localkube.wait import wait_for
from slipway_e2e.deploy import KUBECTL, deploy_operator, kubectl, write_overlay
from slipway_testing import apply_object, condition, inference_deployment, report, wait_status

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".cache" / "helm" / "helm"
CHART = ROOT / "charts" / "slipway"
Obj = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name
SHARED = {"CustomResourceDefinition", "PriorityClass", "Namespace"}  # kept for the session's other tests
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # cluster-scoped


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True, timeout: float = 120) -> str:
    """Run the Helm built by `make helm`; on failure, raise with its stderr."""
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make helm`", pytrace=False)
    home = HELM.parent / "home"  # Helm's own cache and config, away from the user's ~/.config/helm
    env = {**os.environ, **{f"HELM_{d.upper()}_HOME": str(home / d) for d in ("cache", "config", "data")}}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run([str(HELM), *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return done.stdout + done.stderr if not check else done.stdout


def render(*sets: str, release: str = "slipway", namespace: str = "slipway-system") -> list[Obj]:
    args = ["template", release, str(CHART), "-n", namespace]
    for s in sets:
        args += ["--set", s]
    return [o for o in yaml.safe_load_all(helm(*args)) if o]


def kustomize() -> list[Obj]:
    done = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "manifests")], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def key(o: Obj) -> Key:
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


def index(objs: list[Obj]) -> dict[Key, Obj]:
    out = {key(o): o for o in objs}
    assert len(out) == len(objs), "two objects share a kind, namespace and name"
    return out


def only(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[key(o) for o in found]}"
    return found[0]


def container(objs: list[Obj]) -> Obj:
    (c,) = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c  # type: ignore[no-any-return]


def env(objs: list[Obj]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container(objs)["env"]}


def rules(role: Obj) -> set[tuple[str, str, str, str]]:
    """A role's grants as (group, resource, verb, resourceName) tuples, however the rules group them."""
    return {
        (g, r, v, n)
        for rule in role["rules"]
        for g in rule.get("apiGroups", [""])
        for r in rule["resources"]
        for v in rule["verbs"]
        for n in rule.get("resourceNames", ["*"])
    }


def resources_granted(role: Obj) -> set[str]:
    return {r for _, r, _, _ in rules(role)}


# --- Rendering: needs only the helm binary -------------------------------------------------------


def test_lint_is_clean():
    out = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out
    # And with the toggles flipped.
    helm("lint", "--strict", str(CHART), "--set", "watchNamespaces={team-a,team-b}", "--set",
         "priorityClasses.create=false", "--set", "replicas=1", "--set", "userRoles.create=false")  # fmt: skip


def test_defaults_render_what_manifests_deployment_has():
    objs = render()
    deployment = only(objs, "Deployment", "slipway-operator")
    assert deployment["spec"]["replicas"] == 2
    # Multi-tenant mode by default, as manifests/ installs.
    manifest = yaml.safe_load((ROOT / "manifests" / "deployment.yaml").read_text())
    manifest_container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container(objs)["args"] == manifest_container["args"] == ["--all-namespaces", "--require-model-allowlist"]

    # The operator's own MLflow credentials come from a Secret, by reference, as in manifests/.
    def secret_refs_of(entries: list[Obj]) -> dict[str, Obj]:
        return {e["name"]: e["valueFrom"] for e in entries if "secretKeyRef" in e.get("valueFrom", {})}

    secret_refs = secret_refs_of(container(objs)["env"])
    assert secret_refs == secret_refs_of(manifest_container["env"])
    assert set(secret_refs) == {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"}
    assert all(r["secretKeyRef"]["name"] == "slipway-mlflow-credentials" for r in secret_refs.values())
    assert container(objs)["image"] == "ghcr.io/slipway-dev/slipway-operator:0.1.0"
    e = env(objs)
    assert e["SLIPWAY_MLFLOW_URL"] == "http://mlflow.mlflow.svc:5000"
    assert e["SLIPWAY_PROMETHEUS_URL"] == "http://prometheus.monitoring.svc:9090"
    assert e["SLIPWAY_MLFLOW_CREDENTIALS_SECRET"] == "slipway-mlflow-credentials"
    assert e["SLIPWAY_REQUIRE_MODEL_ALLOWLIST"] == "true"
    assert "SLIPWAY_ALLOWED_PROMETHEUS_URLS" not in e and "SLIPWAY_MLFLOW_PUBLIC_URL" not in e
    assert "SLIPWAY_ALLOWED_GATEWAYS" not in e
    assert (e["SLIPWAY_INFERENCE_PRIORITY_CLASS"], e["SLIPWAY_TRAINING_PRIORITY_CLASS"]) == (
        "slipway-inference",
        "slipway-training",
    )
    assert e["SLIPWAY_WORKLOAD_IMAGE"] == "ghcr.io/slipway-dev/slipway-workloads:0.1.0"
    assert e["SLIPWAY_FETCH_IMAGE"] == "ghcr.io/slipway-dev/slipway-workloads:0.1.0"
    # The pod's securityContext is manifests/deployment.yaml's: non-root, read-only root, no capabilities.
    pod, rendered_pod = manifest["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]
    assert rendered_pod["securityContext"] == pod["securityContext"]
    assert rendered_pod["securityContext"]["runAsNonRoot"] is True
    assert container(objs)["securityContext"] == pod["containers"][0]["securityContext"]
    assert container(objs)["securityContext"]["readOnlyRootFilesystem"] is True
    assert container(objs)["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    # Both PriorityClasses, serving above training; training never preempts.
    inference, training = (
        only(objs, "PriorityClass", "slipway-inference"),
        only(objs, "PriorityClass", "slipway-training"),
    )
    assert inference["value"] > training["value"]
    assert training["preemptionPolicy"] == "Never"
    assert only(objs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    # Every namespaced object is in the release namespace.
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] not in
            {"ClusterRole", "ClusterRoleBinding", "PriorityClass", *POLICY_KINDS}} == {"slipway-system"}  # fmt: skip


def test_values_reach_the_operator():
    objs = render(
        "replicas=3",
        "image.repository=registry.example/slipway",
        "image.tag=0.2.0",
        "workloadsImage.repository=registry.example/slipway-workloads",
        "workloadsImage.digest=sha256:" + "b" * 64,
        "mlflow.url=http://mlflow.ml.svc:5000",
        "mlflow.publicUrl=https://mlflow.example.com",
        "mlflow.credentialsSecret=team-mlflow",
        "prometheus.url=http://prom.obs.svc:9090",
        "prometheus.allowedUrls={http://thanos.obs.svc:10902,http://prom.team-a.svc:9090}",
        "requireModelAllowlist=false",
        "allowedGateways={gateway-system/public,infra/*}",
        "mlflow.operatorCredentialsSecret=",
        "resources.limits.memory=1Gi",
        namespace="ops",
    )
    assert only(objs, "Deployment")["spec"]["replicas"] == 3
    assert container(objs)["image"] == "registry.example/slipway:0.2.0"
    assert container(objs)["args"] == ["--all-namespaces"]  # a single-team cluster
    assert not any("valueFrom" in e and "secretKeyRef" in e["valueFrom"] for e in container(objs)["env"])
    assert container(objs)["resources"]["limits"]["memory"] == "1Gi"
    e = env(objs)
    assert e["SLIPWAY_MLFLOW_URL"] == "http://mlflow.ml.svc:5000"
    assert e["SLIPWAY_MLFLOW_PUBLIC_URL"] == "https://mlflow.example.com"
    assert e["SLIPWAY_MLFLOW_CREDENTIALS_SECRET"] == "team-mlflow"
    assert e["SLIPWAY_PROMETHEUS_URL"] == "http://prom.obs.svc:9090"
    assert e["SLIPWAY_ALLOWED_PROMETHEUS_URLS"] == "http://thanos.obs.svc:10902,http://prom.team-a.svc:9090"
    assert e["SLIPWAY_REQUIRE_MODEL_ALLOWLIST"] == "false"
    assert e["SLIPWAY_ALLOWED_GATEWAYS"] == "gateway-system/public,infra/*"
    assert e["SLIPWAY_WORKLOAD_IMAGE"] == "registry.example/slipway-workloads@sha256:" + "b" * 64  # by digest
    assert e["SLIPWAY_FETCH_IMAGE"] == e["SLIPWAY_WORKLOAD_IMAGE"]
    assert "@" not in env(render("image.digest=sha256:" + "a" * 64))["SLIPWAY_WORKLOAD_IMAGE"]  # each its own
    assert container(render("image.digest=sha256:" + "a" * 64))["image"] == (
        "ghcr.io/slipway-dev/slipway-operator@sha256:" + "a" * 64  # a digest wins over the tag
    )
    pinned = "registry.example/slipway@sha256:" + "0" * 64
    assert env(render(f"fetchImage={pinned}"))["SLIPWAY_FETCH_IMAGE"] == pinned
    # The ServiceAccount bound cluster-wide and for the Lease is the one in the release namespace.
    binding = only(objs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slipway-operator", "namespace": "ops"}]
    assert only(objs, "RoleBinding")["metadata"]["namespace"] == "ops"


def test_a_webhook_secret_serves_mlflow_webhooks_from_a_secret_key_ref_only():
    assert "SLIPWAY_MLFLOW_WEBHOOK_SECRET" not in env(render()) and not [
        o for o in render() if o["metadata"]["name"].endswith("-webhook")
    ]
    objs = render("mlflow.webhookSecret=slipway-mlflow-webhook", "mlflow.webhookPort=9443")
    found = {e["name"]: e for e in container(objs)["env"]}
    secret = found["SLIPWAY_MLFLOW_WEBHOOK_SECRET"]  # the value never in the Deployment, only its Secret's name
    assert "value" not in secret and secret["valueFrom"]["secretKeyRef"] == {
        "name": "slipway-mlflow-webhook", "key": "secret"}  # fmt: skip
    assert found["SLIPWAY_MLFLOW_WEBHOOK_PORT"]["value"] == "9443"
    assert {"name": "mlflow-webhook", "containerPort": 9443} in container(objs)["ports"]
    service = only(objs, "Service", "slipway-operator-webhook")
    assert service["spec"]["ports"] == [{"name": "mlflow-webhook", "port": 9443, "targetPort": "mlflow-webhook"}]


def test_prices_become_a_config_map_mounted_where_the_operator_reads_it():
    from slipway.prices import Prices

    assert not any(o["kind"] == "ConfigMap" for o in render()) and "SLIPWAY_PRICES_FILE" not in env(render())
    objs = render("prices.currency=EUR", "prices.gpuHour.default=2.5", "prices.gpuHour.NVIDIA-H100=4",
                  "prices.cpuHour=0.04")  # fmt: skip
    config_map = only(objs, "ConfigMap")
    prices = Prices.parse(yaml.safe_load(config_map["data"]["prices.yaml"]))
    assert prices.currency == "EUR" and prices.gpu_price("NVIDIA-H100") == 4 and prices.cpu_hour == 0.04
    mount = next(m for m in container(objs)["volumeMounts"] if m["name"] == "prices")
    volume = next(v for v in only(objs, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "prices")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert env(objs)["SLIPWAY_PRICES_FILE"] == f"{mount['mountPath']}/prices.yaml"


def test_tls_files_come_by_reference_to_where_the_settings_point():
    assert not [e for e in env(render()) if "_TLS" in e or "CA_BUNDLE" in e or "CLIENT_CERT" in e]
    objs = render(
        "mlflow.tls.caBundle.configMap=corp-ca",
        "mlflow.tls.clientCertSecret=slipway-mlflow-client",
        "mlflow.tls.workloadCaConfigMap=corp-ca",
        "mlflow.tls.workloadClientCertSecret=mlflow-client",
        "prometheus.tls.caBundle.secret=prometheus-ca",
        "prometheus.tls.caBundle.key=bundle.pem",
    )
    e = env(objs)
    mounts = {m["name"]: m["mountPath"] for m in container(objs)["volumeMounts"]}
    volumes = {v["name"]: v for v in only(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert e["SLIPWAY_MLFLOW_CA_BUNDLE"] == f"{mounts['mlflow-ca']}/ca.crt"
    assert volumes["mlflow-ca"]["configMap"]["name"] == "corp-ca"
    client = mounts["mlflow-client-cert"]
    assert e["SLIPWAY_MLFLOW_CLIENT_CERT"] == f"{client}/tls.crt"
    assert e["SLIPWAY_MLFLOW_CLIENT_KEY"] == f"{client}/tls.key"
    assert volumes["mlflow-client-cert"]["secret"]["secretName"] == "slipway-mlflow-client"
    assert e["SLIPWAY_PROMETHEUS_CA_BUNDLE"] == f"{mounts['prometheus-ca']}/bundle.pem"
    assert volumes["prometheus-ca"]["secret"]["items"] == [{"key": "bundle.pem", "path": "bundle.pem"}]
    assert (e["SLIPWAY_MLFLOW_CA_CONFIGMAP"], e["SLIPWAY_MLFLOW_CLIENT_CERT_SECRET"]) == ("corp-ca", "mlflow-client")
    assert "SLIPWAY_MLFLOW_INSECURE_TLS" not in e and "SLIPWAY_PROMETHEUS_CLIENT_CERT" not in e
    assert env(render("mlflow.tls.insecure=true"))["SLIPWAY_MLFLOW_INSECURE_TLS"] == "true"
    sets = ["--set", "mlflow.tls.caBundle.configMap=a", "--set", "mlflow.tls.caBundle.secret=b"]
    both = helm("template", "s", str(CHART), *sets, check=False)
    assert "mlflow.tls.caBundle: set configMap or secret, not both" in both


def test_watched_namespaces_become_flags_and_narrow_the_rbac():
    objs = render("watchNamespaces={team-a,team-b}")
    assert container(objs)["args"] == ["-n", "team-a", "-n", "team-b", "--require-model-allowlist"]
    # Cluster-wide: only cluster-scoped resources. Namespaced objects only in team-a and team-b.
    assert resources_granted(only(objs, "ClusterRole", "slipway-operator")) == {
        "nodes",
        "namespaces",
        "customresourcedefinitions",
        "clusterqueues",
        "cohorts",
    }
    namespaced = only(objs, "ClusterRole", "slipway-operator-namespaced")
    assert {"jobs", "deployments", "trainingruns/status", "events"} <= resources_granted(namespaced)
    bound = {
        b["metadata"]["namespace"]
        for b in objs
        if b["kind"] == "RoleBinding" and b["roleRef"]["name"] == "slipway-operator-namespaced"
    }
    assert bound == {"team-a", "team-b"}
    # The default install grants the same rules, cluster-wide.
    default = only(render(), "ClusterRole", "slipway-operator")
    assert rules(default) == rules(only(objs, "ClusterRole", "slipway-operator")) | rules(namespaced)


def test_a_namespace_pattern_keeps_cluster_wide_rbac():
    objs = render("watchNamespaces={team-*}")
    assert container(objs)["args"] == ["-n", "team-*", "--require-model-allowlist"]
    assert "jobs" in resources_granted(only(objs, "ClusterRole", "slipway-operator"))
    assert not [o for o in objs if o["metadata"]["name"] == "slipway-operator-namespaced"]


def test_priority_classes_toggle():
    off = render("priorityClasses.create=false")
    assert not [o for o in off if o["kind"] == "PriorityClass"]
    # None created: the operator's pods use none, rather than names that do not exist.
    assert (env(off)["SLIPWAY_INFERENCE_PRIORITY_CLASS"], env(off)["SLIPWAY_TRAINING_PRIORITY_CLASS"]) == ("", "")
    own = render("priorityClasses.create=false", "priorityClasses.inference.name=serving-critical")
    assert env(own)["SLIPWAY_INFERENCE_PRIORITY_CLASS"] == "serving-critical"
    # Another release gets its own names (no clash with a kustomize install), and uses them.
    other = render(release="ml-platform")
    names = {o["metadata"]["name"] for o in other if o["kind"] == "PriorityClass"}
    assert names == {"ml-platform-slipway-inference", "ml-platform-slipway-training"}
    assert env(other)["SLIPWAY_TRAINING_PRIORITY_CLASS"] == "ml-platform-slipway-training"


def test_admission_policies_are_manifests_and_follow_the_release_and_the_groups():
    chart = {key(o): o for o in render() if o["kind"] in POLICY_KINDS}
    kust = {key(o): o for o in kustomize() if o["kind"] in POLICY_KINDS}
    assert len(chart) == 4 and set(chart) == set(kust)
    for k in chart:  # the same CEL, word for word
        assert chart[k]["spec"] == kust[k]["spec"], k
    other = [o for o in render("admissionPolicies.namespaceAdminGroups={platform-admins,system:masters}",
                               release="ml", namespace="ops") if o["kind"] in POLICY_KINDS]  # fmt: skip
    writes = only(other, "ValidatingAdmissionPolicy", "ml-slipway-operator-writes")["spec"]
    assert "'system:serviceaccount:ops:ml-slipway-operator'" in writes["matchConditions"][0]["expression"]
    keys = only(other, "ValidatingAdmissionPolicy", "ml-slipway-namespace-keys")["spec"]
    assert "['platform-admins', 'system:masters']" in keys["matchConditions"][0]["expression"]
    assert "groups platform-admins, system:masters," in keys["validations"][0]["messageExpression"]
    assert not [o for o in render("admissionPolicies.enabled=false") if o["kind"] in POLICY_KINDS]
    with pytest.raises(AssertionError, match="namespaceAdminGroups is empty"):
        render("admissionPolicies.namespaceAdminGroups=null")


def test_one_replica_has_no_disruption_budget():
    objs = render("replicas=1")
    assert only(objs, "Deployment")["spec"]["replicas"] == 1
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget"]


MONITORING = ("monitoring.serviceMonitor.enabled=true", "monitoring.podMonitor.enabled=true",
              "monitoring.prometheusRule.enabled=true", "monitoring.dashboard.enabled=true")  # fmt: skip


def test_the_monitoring_kit_is_off_by_default_and_the_same_as_manifests_monitoring_when_on():
    kinds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert not [o for o in render() if o["kind"] in kinds or o["metadata"]["name"].endswith("-dashboard")]
    helm("lint", "--strict", str(CHART), *[a for s in MONITORING for a in ("--set", s)])
    chart = render(*MONITORING, "monitoring.serviceMonitor.labels.release=kube-prometheus-stack")
    done = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "manifests" / "monitoring")], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    kit = {o["kind"]: o for o in yaml.safe_load_all(done.stdout) if o}
    assert only(chart, "PrometheusRule")["spec"] == kit["PrometheusRule"]["spec"]
    assert only(chart, "PodMonitor")["spec"] == kit["PodMonitor"]["spec"]
    monitor = only(chart, "ServiceMonitor")
    assert monitor["spec"]["endpoints"] == kit["ServiceMonitor"]["spec"]["endpoints"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The ServiceMonitor selects the chart's metrics Service, and that Service only.
    service = only(chart, "Service", "slipway-operator-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    dashboard = only(chart, "ConfigMap", "slipway-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"] == kit["ConfigMap"]["data"]


def test_chart_and_kustomize_install_the_same_objects():
    chart = index(render("crds.install=true"))  # the CRDs too, as kustomize applies them
    kust = index(kustomize())
    # The Namespace is kustomize's; Helm creates the release namespace (--create-namespace).
    assert set(chart) == set(kust) - {("Namespace", "", "slipway-system")}, (
        f"only in the chart: {sorted(set(chart) - set(kust))}; only in manifests/: {sorted(set(kust) - set(chart))}"
    )
    for k in chart:
        if k[0] in {"ClusterRole", "Role"}:
            assert rules(chart[k]) == rules(kust[k]), f"{k} grants differ"
        if k[0] in {"ClusterRoleBinding", "RoleBinding"}:
            assert chart[k]["roleRef"] == kust[k]["roleRef"] and chart[k]["subjects"] == kust[k]["subjects"], k
        if k[0] == "CustomResourceDefinition":
            ours = {**chart[k], "metadata": {"name": chart[k]["metadata"]["name"]}}  # Helm's labels and keep aside
            assert ours == kust[k], f"{k}: the chart's copy differs from crds/"
        if k[0] == "PriorityClass":
            for field in ("value", "preemptionPolicy", "globalDefault"):
                assert chart[k][field] == kust[k][field], (k, field)
    for role in ("slipway-edit", "slipway-view"):
        labels = chart[("ClusterRole", "", role)]["metadata"]["labels"]
        assert {k: v for k, v in labels.items() if k.startswith("rbac.")} == {
            k: v for k, v in kust[("ClusterRole", "", role)]["metadata"]["labels"].items() if k.startswith("rbac.")
        }
    ours, theirs = container(list(chart.values())), container(list(kust.values()))
    for field in ("command", "args", "ports", "livenessProbe", "readinessProbe", "resources", "securityContext"):
        assert ours[field] == theirs[field], field
    # Environment: the same variables, with values only where values say otherwise (none by default).
    kust_env = {e["name"]: e.get("value") for e in theirs["env"]}
    chart_env = env(list(chart.values()))
    assert {k: v for k, v in chart_env.items() if k in kust_env} == kust_env
    assert set(chart_env) - set(kust_env) == {
        "SLIPWAY_MLFLOW_CREDENTIALS_SECRET",
        "SLIPWAY_REQUIRE_MODEL_ALLOWLIST",
        "SLIPWAY_INFERENCE_PRIORITY_CLASS",
        "SLIPWAY_TRAINING_PRIORITY_CLASS",
    }  # each set to the operator's own default, so the two installs behave alike


# --- On the local cluster -------------------------------------------------------------------------


def kubectl_stdin(cluster: ClusterInfo, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([str(KUBECTL), *args], input=text, env=e, capture_output=True, text=True, timeout=120)


@pytest.mark.cluster
@pytest.mark.parametrize(
    "sets",
    [
        (),
        (
            "watchNamespaces={NS}",
            "priorityClasses.create=false",
            "replicas=1",
            "requireModelAllowlist=true",
            "prices.currency=USD",
            "prices.gpuHour=2.5",
            "mlflow.webhookSecret=slipway-mlflow-webhook",
            "crds.install=true",
            "mlflow.tls.caBundle.configMap=corp-ca",
            "mlflow.tls.clientCertSecret=slipway-mlflow-client",
            "prometheus.tls.insecure=true",
        ),
    ],
    ids=["defaults", "toggled"],
)
def test_the_api_server_accepts_what_the_chart_renders(cluster, namespace, sets):
    objs = render(*(s.replace("NS", namespace) for s in sets), release="slipway-dry", namespace=namespace)
    text = yaml.safe_dump_all(objs)
    done = kubectl_stdin(cluster, text, "apply", "--dry-run=server", "-f", "-")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(objs), done.stdout


def slipway_system_pods(kube_api: client.ApiClient, ns: str) -> list[str]:
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=operator")
    return [p.metadata.name for p in pods.items]


@pytest.mark.cluster
@pytest.mark.serial  # cluster-wide install, then its ClusterRoles deleted
def test_kustomize_installs_in_one_pass(cluster, kube_api):
    """`kubectl apply -k` of manifests/ (the overlay only sets the URLs): one pass, the operator rolls out."""
    crds_new = kubectl(cluster, "get", "crd", "trainingruns.slipway.dev", check=False).returncode != 0
    start = time.monotonic()
    deploy_operator(cluster)  # raises unless the single apply succeeds; waits for the rollout
    report(f"kubectl apply -k manifests/ overlay: one pass and rollout in {time.monotonic() - start:.1f}s"
           f" ({'CRDs new in that apply' if crds_new else 'CRDs already there'})")  # fmt: skip
    # Remove the operator and its RBAC; keep what other tests of the session use (the CRDs, the
    # PriorityClasses that install_crds put there, the namespace slipway-system).
    rendered = subprocess.run([str(KUBECTL), "kustomize", str(write_overlay(cluster))], capture_output=True,
                              text=True, timeout=60, check=True).stdout  # fmt: skip
    rest = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] not in SHARED]
    done = kubectl_stdin(cluster, yaml.safe_dump_all(rest), "delete", "--wait=true", "-f", "-")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not slipway_system_pods(kube_api, "slipway-system"), 120, "the kustomize operator pods gone")


def can_i(cluster: ClusterInfo, user: str, verb: str, resource: str, namespace: str, subresource: str = "") -> bool:
    extra = [f"--subresource={subresource}"] if subresource else []  # not TYPE/NAME: that names an object
    done = kubectl(cluster, "auth", "can-i", verb, resource, *extra, "-n", namespace, f"--as={user}", check=False)
    answer = done.stdout.strip()
    assert answer in {"yes", "no"}, f"kubectl auth can-i: {done.stdout}{done.stderr}"
    return answer == "yes"


def other_aggregated_slipway_roles(kube_api: client.ApiClient, release_labels: dict[str, str]) -> list[str]:
    roles = client.RbacAuthorizationV1Api(kube_api).list_cluster_role(
        label_selector="rbac.authorization.k8s.io/aggregate-to-edit=true"
    )
    return [
        r.metadata.name
        for r in roles.items
        if any("slipway.dev" in (rule.api_groups or []) for rule in r.rules or [])
        and (r.metadata.labels or {}).get("app.kubernetes.io/instance") != release_labels["app.kubernetes.io/instance"]
    ]


def missing_model_deployment(name: str) -> Obj:
    """An InferenceDeployment whose ModelArtifact does not exist: the operator writes status, starts no pod."""
    return inference_deployment(name, {"artifactRef": {"name": "no-such-artifact"}}, replicas=None)


def has_status(obj: Obj) -> bool:
    status = obj.get("status") or {}
    return status.get("observedGeneration") == obj["metadata"]["generation"] and bool(status.get("conditions"))


@pytest.mark.cluster
@pytest.mark.serial  # an operator for all namespaces
def test_helm_install_reconciles_grants_user_roles_and_uninstalls(cluster, kube_api, namespace):
    release = system = f"slipway-chart-{secrets.token_hex(2)}"
    kubectl(cluster, "create", "namespace", system)
    try:
        kubectl(cluster, "label", "namespace", system, "pod-security.kubernetes.io/enforce=restricted")
        start = time.monotonic()
        helm("install", release, str(CHART), "-n", system, "--create-namespace",
             "--set", f"mlflow.url={cluster.mlflow_url}", "--set", f"prometheus.url={cluster.prometheus_url}",
             kubeconfig=cluster.kubeconfig)  # fmt: skip
        kubectl(cluster, "-n", system, "rollout", "status", f"deployment/{release}-operator", "--timeout=180s",
                timeout=190)  # fmt: skip
        rollout = time.monotonic() - start
        pods = slipway_system_pods(kube_api, system)
        assert len(pods) == 2, pods
        holder = wait_for(lambda: kubectl(cluster, "-n", system, "get", "lease", "slipway-operator", "-o",
                                          "jsonpath={.spec.holderIdentity}", check=False).stdout, 60,
                          "a replica holding the Lease")  # fmt: skip
        assert holder in pods

        # Its RBAC works: it writes status (cluster-wide watch, status patch) for an object in another namespace.
        start = time.monotonic()
        apply_object(kube_api, namespace, missing_model_deployment("chart-proof"))
        obj = wait_status(kube_api, namespace, "InferenceDeployment", "chart-proof", has_status, 90, "status")
        reconciled = time.monotonic() - start
        ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False", ready
        # Multi-tenant mode by default: the namespace has no allow-list, so no MLflow model is its to use.
        tenancy_proof = missing_model_deployment("chart-tenancy")
        tenancy_proof["spec"]["model"] = {"name": "another-teams-model", "alias": "production"}
        apply_object(kube_api, namespace, tenancy_proof)
        refused = wait_status(kube_api, namespace, "InferenceDeployment", "chart-tenancy",
                              lambda o: condition(o, "Stalled").get("reason") == "ModelNotAllowed", 60,
                              "the model refused (multi-tenant mode)")  # fmt: skip
        assert "--require-model-allowlist" in condition(refused, "Stalled")["message"]

        # The aggregated user roles: edit may create, view may only read, nobody else anything.
        rbac = client.RbacAuthorizationV1Api(kube_api)
        for user, role in (("alice", "edit"), ("bob", "view")):
            rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=f"{user}-{role}"),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
                subjects=[client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")],
            ))  # fmt: skip
        idep = "inferencedeployments.slipway.dev"
        wait_for(lambda: can_i(cluster, "alice", "create", idep, namespace), 30, "edit to aggregate slipway-edit")
        wait_for(lambda: can_i(cluster, "bob", "list", idep, namespace), 30, "view to aggregate slipway-view")
        assert can_i(cluster, "alice", "delete", "trainingruns.slipway.dev", namespace)
        assert can_i(cluster, "alice", "patch", "modelartifacts.slipway.dev", namespace)
        assert not can_i(cluster, "alice", "patch", idep, namespace, "status")  # status is the operator's
        assert not can_i(cluster, "bob", "create", idep, namespace)
        assert not can_i(cluster, "bob", "delete", "trainingruns.slipway.dev", namespace)
        assert can_i(cluster, "bob", "get", "modelartifacts.slipway.dev", namespace)
        assert can_i(cluster, "bob", "get", "trainingruns.slipway.dev", namespace, "status")
        assert not can_i(cluster, "carol", "list", idep, namespace)
        assert not can_i(cluster, "alice", "create", idep, "default")  # bound in one namespace only

        # Uninstall: no operator pod stays; the CRDs (and so users' objects) do.
        start = time.monotonic()
        helm("uninstall", release, "-n", system, "--wait", "--timeout=120s", kubeconfig=cluster.kubeconfig)
        wait_for(lambda: not slipway_system_pods(kube_api, system), 120, "the chart's operator pods gone")
        uninstalled = time.monotonic() - start
        kubectl(cluster, "get", "crd", "inferencedeployments.slipway.dev")
        others = other_aggregated_slipway_roles(kube_api, {"app.kubernetes.io/instance": release})
        if not others:  # nothing else grants Slipway's kinds to edit: alice has lost them with the chart
            wait_for(lambda: not can_i(cluster, "alice", "create", idep, namespace), 30, "slipway-edit gone from edit")
        report(f"helm install + rollout {rollout:.1f}s; first status {reconciled:.1f}s; uninstall {uninstalled:.1f}s"
               + (f"; other aggregated roles present: {others}" if others else ""))  # fmt: skip
    finally:
        helm("uninstall", release, "-n", system, "--ignore-not-found", kubeconfig=cluster.kubeconfig, check=False)
        kubectl(cluster, "delete", "namespace", system, "--wait=false", check=False)


@pytest.mark.cluster
def test_helm_install_watching_one_namespace(cluster, kube_api, namespace):
    """watchNamespaces: the operator reconciles there, and its ServiceAccount may touch nothing elsewhere."""
    release = system = f"slipway-scoped-{secrets.token_hex(2)}"
    kubectl(cluster, "create", "namespace", system)
    try:
        helm("install", release, str(CHART), "-n", system, "--set", f"watchNamespaces={{{namespace}}}",
             "--set", "replicas=1", "--set", "priorityClasses.create=false", "--set", "userRoles.create=false",
             "--set", f"mlflow.url={cluster.mlflow_url}", "--set", f"prometheus.url={cluster.prometheus_url}",
             kubeconfig=cluster.kubeconfig)  # fmt: skip
        kubectl(cluster, "-n", system, "rollout", "status", f"deployment/{release}-operator", "--timeout=180s",
                timeout=190)  # fmt: skip
        sa = f"system:serviceaccount:{system}:{release}-operator"
        assert can_i(cluster, sa, "create", "jobs.batch", namespace)
        assert can_i(cluster, sa, "patch", "inferencedeployments.slipway.dev", namespace, "status")
        assert not can_i(cluster, sa, "update", "inferencedeployments.slipway.dev", namespace)  # never a spec
        assert not can_i(cluster, sa, "create", "jobs.batch", "default")
        assert not can_i(cluster, sa, "list", "inferencedeployments.slipway.dev", "default")
        apply_object(kube_api, namespace, missing_model_deployment("scoped-proof"))
        wait_status(kube_api, namespace, "InferenceDeployment", "scoped-proof", has_status, 90, "status")
    finally:
        helm("uninstall", release, "-n", system, "--ignore-not-found", "--wait", kubeconfig=cluster.kubeconfig,
             check=False)  # fmt: skip
        wait_for(lambda: not slipway_system_pods(kube_api, system), 120, "the scoped operator pods gone")
        kubectl(cluster, "delete", "namespace", system, "--wait=false", check=False)
