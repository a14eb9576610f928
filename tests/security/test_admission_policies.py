"""The API server's own guards (charts/slipway/templates/admissionpolicies.yaml, as
manifests/admissionpolicies.yaml installs them), whatever RBAC grants: the operator's identity,
with the chart's cluster-wide RBAC, writes only Slipway's objects in namespaces enabled for Slipway
and on a pod only lifts its scheduling gate; a tenant allowed to patch its Namespace cannot change
the Namespace's slipway.dev/* annotations or labels.

The tests share the cluster with others: each renders the chart with a release of its own in its
own namespace, so the operator policy matches only that release's ServiceAccount, and binds the
Namespace policy only to its own namespaces (a selector on the binding)."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.kube import Kube
from localkube.wait import wait_for
from slipway.training import build, gate
from slipway_testing import ROOT, apply_object, inference_deployment, release, report

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
ATTACK = "slipway.test/attack"  # a label of what the attacks try to make (the test's namespace): counted
MERGE = "application/merge-patch+json"  # as the operator patches (slipway.kube.patch)
RBAC = "/apis/rbac.authorization.k8s.io/v1"
POLICIES = "/apis/admissionregistration.k8s.io/v1"
CLUSTER_SCOPED = {
    "ClusterRole": f"{RBAC}/clusterroles",
    "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
    "ValidatingAdmissionPolicy": f"{POLICIES}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{POLICIES}/validatingadmissionpolicybindings",
}
NAMESPACED = {"ServiceAccount": "/api/v1/namespaces/{}/serviceaccounts", "Role": RBAC + "/namespaces/{}/roles",
              "RoleBinding": RBAC + "/namespaces/{}/rolebindings"}  # fmt: skip


def render(release_name: str, namespace: str, *templates: str) -> list[Obj]:
    """``helm template`` of the chart, as ``helm install`` renders it, limited to ``templates``."""
    if not release.HELM.exists():
        pytest.fail(f"{release.HELM} is missing: run `make helm`", pytrace=False)
    home = release.HELM.parent / "home"  # Helm's own cache and config, away from the user's
    env = {**os.environ, **{f"HELM_{d.upper()}_HOME": str(home / d) for d in ("cache", "config", "data")}}
    shown = [a for t in templates for a in ("--show-only", f"templates/{t}")]
    done = subprocess.run([str(release.HELM), "template", release_name, str(ROOT / "charts" / "slipway"), "-n",
                           namespace, *shown], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def collection(obj: Obj) -> str:
    kind = obj["kind"]
    return CLUSTER_SCOPED.get(kind) or NAMESPACED[kind].format(obj["metadata"]["namespace"])


@pytest.fixture
def installed(cluster) -> Iterator[Callable[[list[Obj]], None]]:
    """Create rendered objects; the cluster-scoped ones are deleted afterwards (the namespaced ones go
    with the test's namespace)."""
    kube = Kube(cluster.kubeconfig)
    made: list[Obj] = []

    def install(objs: list[Obj]) -> None:
        for obj in objs:
            kube.create(collection(obj), obj)
            made.append(obj)
        for obj in objs:  # the API server type-checks a policy's CEL against the kinds it matches
            if obj["kind"] == "ValidatingAdmissionPolicy":
                path = f"{collection(obj)}/{obj['metadata']['name']}"
                status = wait_for(lambda p=path: kube.get(p).get("status", {}).get("typeChecking") is not None
                                  and kube.get(p)["status"], 30, f"{path} type-checked")  # fmt: skip
                assert not status["typeChecking"].get("expressionWarnings"), status

    yield install
    for obj in reversed(made):
        if obj["kind"] in CLUSTER_SCOPED:
            kube.delete(f"{collection(obj)}/{obj['metadata']['name']}")


def refusal(call: Callable[[], Any]) -> str:
    """The API server's message refusing ``call`` (403), or the test fails."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    return str(refused.value.body)


def service_account_client(cluster, kube_api: client.ApiClient, namespace: str, name: str) -> client.ApiClient:
    """An API client that is the ServiceAccount, with a token the API server issued for it (as in its pod)."""
    spec = client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    issued = client.CoreV1Api(kube_api).create_namespaced_service_account_token(
        name, namespace, client.AuthenticationV1TokenRequest(spec=spec)
    )
    cfg = client.Configuration()
    cfg.host = cluster.apiserver_url
    cfg.ssl_ca_cert = str(Path(cluster.pki) / "ca.crt")
    cfg.api_key = {"authorization": f"Bearer {issued.status.token}"}
    return client.ApiClient(cfg)


def labels(label: str | None, managed: bool) -> dict[str, str]:
    """``ATTACK: label`` (to count what got made) and, ``managed``, Slipway's label."""
    return {**({ATTACK: label} if label else {}), **({"app.kubernetes.io/managed-by": "slipway"} if managed else {})}


def job(name: str, namespace: str, label: str | None = None, managed: bool = True) -> Obj:
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace,
            "labels": labels(label, managed)}, "spec": {"suspend": True, "template": {"spec": pod}}}  # fmt: skip


def deployment(name: str, namespace: str, label: str | None = None, managed: bool = True) -> Obj:
    pod = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace,
            "labels": labels(label, managed)}, "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": pod}}  # fmt: skip


def gated_pod(name: str, namespace: str) -> Obj:
    """A training pod as its Job makes it: Slipway's labels, held by its gate and by one of someone else's
    (which keeps it unscheduled once Slipway's is lifted)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
            "labels": build.labels("attack")},
            "spec": {"schedulingGates": [{"name": gate.RUN_GATE}, {"name": "example.com/hold"}],
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}  # fmt: skip


def message_of(call: Callable[[], Any]) -> str:
    """The API server's message refusing ``call``, or "" if it was accepted."""
    try:
        call()
    except ApiException as exc:
        return str(exc.body)
    return ""


class Attacks:
    """Calls the API server must refuse with a policy's words: each one counted."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def refuse(self, call: Callable[[], Any], *words: str) -> None:
        message = refusal(call)
        assert all(w in message for w in words), f"expected {words} in: {message}"
        self.refused.append(message)


def test_the_operators_identity_writes_only_slipways_objects_in_enabled_namespaces(
    cluster, kube_api, namespace, slipway_crds, installed
):
    name = f"vap-{secrets.token_hex(3)}"
    objs = render(name, namespace, "serviceaccount.yaml", "clusterrole.yaml", "role.yaml", "admissionpolicies.yaml")
    installed([o for o in objs if not o["metadata"]["name"].endswith("-namespace-keys")])
    sa = next(o for o in objs if o["kind"] == "ServiceAccount")["metadata"]["name"]
    api = service_account_client(cluster, kube_api, namespace, sa)
    batch, apps = client.BatchV1Api(api), client.AppsV1Api(api)
    # Active once the API server has both the RBAC and the policy: then the policy is what refuses.
    probe = job("probe", "kube-system", label=namespace)
    wait_for(lambda: "enabled for Slipway" in message_of(lambda: batch.create_namespaced_job("kube-system", probe,
             dry_run="All")), 60, "the operator policy in force")  # fmt: skip
    attacks = Attacks()
    try:
        outside_enabled_namespaces(attacks, batch, apps, namespace)
        own_kinds(attacks, kube_api, api, namespace)  # the namespace not enabled yet
        enable(kube_api, batch, namespace)
        only_managed_objects(attacks, kube_api, batch, apps, namespace)
        only_the_gate_of_a_pod(attacks, kube_api, client.CoreV1Api(api), namespace)
        own_namespace(attacks, client.CoreV1Api(api), client.CoordinationV1Api(api), namespace)
    finally:
        leaked = objects_labelled(kube_api, "kube-system", namespace)
        for kind, leaked_name in leaked:
            delete = apps.delete_namespaced_deployment if kind == "Deployment" else batch.delete_namespaced_job
            delete(leaked_name, "kube-system")
        api.close()
    made = objects_labelled(kube_api, namespace, namespace)
    report(f"operator policy: {len(attacks.refused)} writes refused, {len(leaked)} made in kube-system, "
           f"{sorted(made)} made in the enabled namespace")  # fmt: skip
    assert leaked == []
    assert sorted(made) == [("Deployment", "child"), ("Job", "child")]


def objects_labelled(kube_api: client.ApiClient, namespace: str, value: str) -> list[tuple[str, str]]:
    selector = f"{ATTACK}={value}"
    jobs = client.BatchV1Api(kube_api).list_namespaced_job(namespace, label_selector=selector).items
    deployments = client.AppsV1Api(kube_api).list_namespaced_deployment(namespace, label_selector=selector).items
    return [("Job", j.metadata.name) for j in jobs] + [("Deployment", d.metadata.name) for d in deployments]


def outside_enabled_namespaces(attacks: Attacks, batch, apps, namespace: str) -> None:
    """A Job and a Deployment of Slipway's, in kube-system and in a namespace not enabled: refused."""
    attacks.refuse(lambda: batch.create_namespaced_job("kube-system", job("mount-secrets", "kube-system",
                   label=namespace)), "namespace kube-system has none", "slipway.dev/allowed-models")  # fmt: skip
    attacks.refuse(lambda: apps.create_namespaced_deployment("kube-system", deployment("mount-secrets",
                   "kube-system", label=namespace)), "namespace kube-system has none")  # fmt: skip
    attacks.refuse(lambda: batch.create_namespaced_job(namespace, job("child", namespace, label=namespace)),
                   f"namespace {namespace} has none")  # fmt: skip


def enable(kube_api: client.ApiClient, batch, namespace: str) -> None:
    """A cluster admin enables the namespace; the API server's view of it follows a moment later."""
    client.CoreV1Api(kube_api).patch_namespace(namespace, {"metadata": {"annotations": {
        "slipway.dev/allowed-models": "attack-*"}}})  # fmt: skip
    child = job("child", namespace, label=namespace)
    wait_for(lambda: batch.create_namespaced_job(namespace, child, dry_run="All"), 30, "the namespace enabled")


def only_managed_objects(attacks: Attacks, kube_api: client.ApiClient, batch, apps, namespace: str) -> None:
    """In the enabled namespace: Slipway's children are made; an object not labelled as Slipway's is
    neither made nor taken over (a tenant's Deployment relabelled)."""
    batch.create_namespaced_job(namespace, job("child", namespace, label=namespace))
    apps.create_namespaced_deployment(namespace, deployment("child", namespace, label=namespace))
    attacks.refuse(lambda: batch.create_namespaced_job(namespace, job("unlabelled", namespace, managed=False)),
                   "app.kubernetes.io/managed-by=slipway")  # fmt: skip
    theirs = deployment("tenant-app", namespace, managed=False)
    client.AppsV1Api(kube_api).create_namespaced_deployment(namespace, theirs)
    takeover = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "slipway"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "evil"}]}}}}  # fmt: skip
    attacks.refuse(lambda: apps.patch_namespaced_deployment("tenant-app", namespace, takeover, _content_type=MERGE),
                   "app.kubernetes.io/managed-by=slipway")  # fmt: skip
    kept = client.AppsV1Api(kube_api).read_namespaced_deployment("tenant-app", namespace)
    assert kept.spec.template.spec.containers[0].image == "busybox" and ATTACK not in (kept.metadata.labels or {})


def only_the_gate_of_a_pod(attacks: Attacks, kube_api: client.ApiClient, core, namespace: str) -> None:
    """On a training pod, the operator lifts its own gate (the patch the operator sends) and nothing else."""
    pod = gated_pod("train-0", namespace)
    client.CoreV1Api(kube_api).create_namespaced_pod(namespace, pod)
    words = "may only lift the slipway.dev/mlflow-run scheduling gate"
    smp, hold = "application/strategic-merge-patch+json", [{"name": "example.com/hold"}]
    patches = [  # each one an update the API server's validation allows on a pod
        ({"spec": {"containers": [{"name": "c", "image": "evil"}]}}, smp),  # another image
        ({"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}, smp),  # onto other nodes
        ({"spec": {"schedulingGates": None}}, MERGE),  # every gate, someone else's too
        ({"metadata": {"labels": {"extra": "x"}}, "spec": {"schedulingGates": hold}}, MERGE),
        ({"metadata": {"annotations": {"other": "x"}}, "spec": {"schedulingGates": hold}}, MERGE),
    ]
    for patch, kind in patches:
        attacks.refuse(lambda p=patch, k=kind: core.patch_namespaced_pod("train-0", namespace, p, _content_type=k),
                       words)  # fmt: skip
    link = gate.MlflowLink("http://mlflow", "run-1", "7")
    core.patch_namespaced_pod("train-0", namespace, gate.release(pod, link), _content_type=MERGE)
    lifted = client.CoreV1Api(kube_api).read_namespaced_pod("train-0", namespace)
    assert [g.name for g in lifted.spec.scheduling_gates] == ["example.com/hold"]
    assert {k: lifted.metadata.annotations[k] for k in link.annotations()} == link.annotations()
    assert lifted.spec.containers[0].image == "busybox"
    again = {"metadata": {"annotations": {gate.RUN_ID_ANNOTATION: "run-2"}}}  # no gate left to lift
    attacks.refuse(lambda: core.patch_namespaced_pod("train-0", namespace, again, _content_type=MERGE), words)


def own_kinds(attacks: Attacks, kube_api: client.ApiClient, api: client.ApiClient, namespace: str) -> None:
    """Its kinds' status is written anywhere (a namespace not enabled is told so there), never a spec."""
    body = inference_deployment("idep", {"artifactRef": {"name": "none"}}, None, image="busybox", command=["serve"])
    apply_object(kube_api, namespace, body)
    custom = client.CustomObjectsApi(api)
    args = ("slipway.dev", "v1alpha1", namespace, "inferencedeployments", "idep")
    custom.patch_namespaced_custom_object_status(*args, {"status": {"observedGeneration": 1}}, _content_type=MERGE)
    forged = {"spec": {"image": "evil"}}
    attacks.refuse(lambda: custom.patch_namespaced_custom_object(*args, forged, _content_type=MERGE),
                   "never changes a spec")  # fmt: skip


def own_namespace(attacks: Attacks, core, coordination, namespace: str) -> None:
    """In its own namespace (here the test's, enabled too: the worst case), its Lease and the Secret of
    its proofs' key are written; no other Secret, though its Role lets it create any there."""
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="slipway-operator"), spec=client.V1LeaseSpec())
    coordination.create_namespaced_lease(namespace, lease)
    proof = client.V1Secret(metadata=client.V1ObjectMeta(name="slipway-mlflow-proof"), data={"key": "a2V5"})
    core.create_namespaced_secret(namespace, proof)  # as slipway.proofkey makes it
    token = client.V1Secret(type="kubernetes.io/service-account-token", metadata=client.V1ObjectMeta(
        name="minted", labels={"app.kubernetes.io/managed-by": "slipway"},
        annotations={"kubernetes.io/service-account.name": "default"}))  # fmt: skip
    attacks.refuse(lambda: core.create_namespaced_secret(namespace, token), "writes no Secret but")


def namespace_editor(name: str, user: str, namespace: str) -> list[Obj]:
    """RBAC that lets ``user`` patch its Namespace and create namespaces, as some platforms let tenants:
    then only the policy stands between it and its Namespace's slipway.dev/* keys."""
    rules = [{"apiGroups": [""], "resources": ["namespaces"], "resourceNames": [namespace],
              "verbs": ["get", "patch", "update"]},
             {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]}]  # fmt: skip
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules}  # fmt: skip
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]}  # fmt: skip
    return [role, binding]


def test_only_namespace_admins_change_a_namespaces_slipway_keys(cluster, kube_api, namespace, tenant, installed):
    name, other = f"vap-{secrets.token_hex(3)}", f"{namespace}-new"
    policy = [o for o in render(name, namespace, "admissionpolicies.yaml") if o["metadata"]["name"].endswith("-keys")]
    for obj in policy:  # bound to this test's namespaces only: other tests share the cluster
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            names = [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace, other]}]
            obj["spec"]["matchResources"] = {"objectSelector": {"matchExpressions": names}}
    installed([*namespace_editor(f"{name}-namespace-editor", tenant.user, namespace), *policy])
    admin, theirs = client.CoreV1Api(kube_api), client.CoreV1Api(tenant.api)

    def annotate(api: client.CoreV1Api, key: str, value: str | None, dry_run: str | None = None) -> Any:
        return api.patch_namespace(namespace, {"metadata": {"annotations": {key: value}}}, dry_run=dry_run)

    models = "slipway.dev/allowed-models"
    words = ("may be set, changed or removed only by members of the groups system:masters", tenant.user)
    wait_for(lambda: words[0] in message_of(lambda: annotate(theirs, models, "*", dry_run="All")), 60,
             "the Namespace policy in force, and the tenant's RBAC")  # fmt: skip
    annotate(admin, models, "team-a-*")  # an admin may
    annotate(theirs, "example.com/owner", "team-a")  # RBAC lets the tenant patch its Namespace
    attacks = Attacks()
    try:
        attacks.refuse(lambda: annotate(theirs, models, "*"), *words, f"Namespace {namespace}: {models}")
        attacks.refuse(lambda: annotate(theirs, models, None), *words, models)
        attacks.refuse(lambda: annotate(theirs, "slipway.dev/mlflow-credentials", "admin-creds"), *words)
        label = {"metadata": {"labels": {"slipway.dev/team": "a"}}}
        attacks.refuse(lambda: theirs.patch_namespace(namespace, label), *words, "slipway.dev/team")
        created = client.V1Namespace(metadata=client.V1ObjectMeta(name=other, annotations={models: "*"}))
        attacks.refuse(lambda: theirs.create_namespace(created), *words, f"Namespace {other}: {models}")
        annotate(admin, models, "team-a-*, team-b-*")  # still, an admin may
    finally:
        leaked = [n.metadata.name for n in admin.list_namespace(field_selector=f"metadata.name={other}").items]
        for ns in leaked:
            admin.delete_namespace(ns)
    meta = admin.read_namespace(namespace).metadata
    both = {**(meta.annotations or {}), **(meta.labels or {})}
    keys = {k: v for k, v in both.items() if k.startswith("slipway.dev/")}
    report(f"namespace policy: {len(attacks.refused)} changes refused, namespaces made: {leaked}, keys now: {keys}")
    assert keys == {models: "team-a-*, team-b-*"} and leaked == []
