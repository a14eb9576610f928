"""A CRD upgrade never makes a stored object invalid, nor loses a field of it.

The previous CRDs (tests/data/crd-upgrade/previous/, crds/ of the commit its COMMIT file names) are
installed with `kubectl apply --server-side`, as install.yaml and the upgrade guide install them;
objects of the three kinds are stored in every phase those CRDs know, statuses written through the
status subresource with the durable decisions (lastRollback, previousStable, pendingRegistryUpdates);
no operator runs. Then crds/ is applied the same way, and every object is read back: nothing is
pruned or changed, a no-op patch of spec and status is accepted, a new object given the same spec
and status validates from scratch (no ratcheting: every field is new to it), and the operator's
models read the status with nothing to repair.

CRDs are cluster-scoped and the cluster is shared: both generations are copies in a private group
(``upgrade-<tag>.slipway.dev``, kinds prefixed, no short names or categories), deleted afterwards.
"""

from __future__ import annotations

import copy
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.wait import wait_for
from slipway.models.inferencedeployment import InferenceDeploymentSpec, InferenceDeploymentStatus
from slipway.models.modelartifact import ModelArtifactSpec, ModelArtifactStatus
from slipway.models.trainingrun import TrainingRunSpec, TrainingRunStatus
from slipway.status.writer import repaired
from slipway_e2e.deploy import kubectl
from slipway_testing import VERSION, report
from slipway_testing.crdcopies import (
    KINDS,
    UPGRADE_DATA,
    added,
    current_crds,
    lost,
    previous_commit,
    previous_crds,
    private_names,
    privatize,
)

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
MODELS = {
    "TrainingRun": (TrainingRunSpec, TrainingRunStatus),
    "ModelArtifact": (ModelArtifactSpec, ModelArtifactStatus),
    "InferenceDeployment": (InferenceDeploymentSpec, InferenceDeploymentStatus),
}


class Copy:
    """The private copy of Slipway's kinds: its group, names, and objects in one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.tag = "u" + secrets.token_hex(3)
        self.group = f"upgrade-{self.tag}.slipway.dev"
        self.api = client.CustomObjectsApi(api)
        self.namespace = namespace

    def crd_names(self) -> list[str]:
        return [f"{private_names(kind, self.tag)['plural']}.{self.group}" for kind in KINDS]

    def plural(self, kind: str) -> str:
        return private_names(kind, self.tag)["plural"]

    def body(self, kind: str, name: str, spec: Obj) -> Obj:
        kind_name = private_names(kind, self.tag)["kind"]
        return {"apiVersion": f"{self.group}/{VERSION}", "kind": kind_name, "metadata": {"name": name}, "spec": spec}

    def create(self, kind: str, name: str, spec: Obj, dry_run: bool = False) -> Obj:
        return self.api.create_namespaced_custom_object(  # type: ignore[no-any-return]
            self.group, VERSION, self.namespace, self.plural(kind), self.body(kind, name, copy.deepcopy(spec)),
            dry_run="All" if dry_run else None, field_validation="Strict")  # fmt: skip

    def patch(self, kind: str, name: str, body: Obj, status: bool = False) -> Obj:
        patch = self.api.patch_namespaced_custom_object_status if status else self.api.patch_namespaced_custom_object
        return patch(self.group, VERSION, self.namespace, self.plural(kind), name, body, field_validation="Strict")  # type: ignore[no-any-return]

    def get(self, kind: str, name: str) -> Obj:
        return self.api.get_namespaced_custom_object(self.group, VERSION, self.namespace, self.plural(kind), name)  # type: ignore[no-any-return]


@pytest.fixture
def private(cluster, kube_api, namespace):
    """The private group's CRDs are deleted after the test (and with them its objects)."""
    kinds = Copy(kube_api, namespace)
    yield kinds
    for name in kinds.crd_names():
        kubectl(cluster, "delete", "crd", name, "--ignore-not-found", "--wait=false", check=False)


def apply_server_side(cluster, kinds: Copy, crds: dict[str, Obj], path: Path) -> None:
    """`kubectl apply --server-side` of the private copies of ``crds``; waits until each kind is served."""
    path.write_text(yaml.safe_dump_all([privatize(crds[kind], kinds.group, kinds.tag) for kind in KINDS]))
    done = kubectl(cluster, "apply", "--server-side", "-f", str(path), check=False)
    assert done.returncode == 0, f"kubectl apply --server-side -f {path.name}: {done.stderr}"
    names = [f"crd/{name}" for name in kinds.crd_names()]
    kubectl(cluster, "wait", "--for=condition=Established", *names, "--timeout=60s", timeout=70)

    def served() -> bool:
        for kind in KINDS:
            try:
                kinds.api.list_namespaced_custom_object(
                    kinds.group, VERSION, kinds.namespace, kinds.plural(kind), limit=1
                )
            except ApiException:
                return False
        return True

    wait_for(served, 60, f"the kinds of {kinds.group} served")


def deep_merge(base: Obj, extra: Obj) -> Obj:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def probe_accepted(kinds: Copy, data: Obj, kind: str) -> bool:
    """Whether the API server takes a spec with a field only the new CRD knows (strict, dry run)."""
    try:
        kinds.create(kind, f"probe-{kind.lower()}", deep_merge(data["specs"][kind], data["probes"][kind]), dry_run=True)
    except ApiException as exc:
        assert exc.status in (400, 422), exc.body
        return False
    return True


def store_every_phase(kinds: Copy, data: Obj) -> dict[tuple[str, str], Obj]:
    """Each object of the data file created and its status written, under the CRDs served now;
    returns what the API server answered, by (kind, name)."""
    stored = {}
    for entry in data["objects"]:
        kind, status = entry["kind"], entry["status"]
        name = f"{kind.lower()}-{status['phase'].lower()}"
        kinds.create(kind, name, data["specs"][kind])
        answer = kinds.patch(kind, name, {"status": status}, status=True)
        assert lost(status, answer["status"]) == [], f"{kind} {name}: the previous CRD kept not all of its status"
        stored[(kind, name)] = answer
    return stored


def check_read_back(kinds: Copy, kind: str, name: str, before: Obj) -> dict[str, Any]:
    """One object after the upgrade: read back, patched, copied to a new object, read by the models."""
    after = kinds.get(kind, name)
    row: dict[str, Any] = {"kind": kind, "name": name, "phase": before["status"]["phase"]}
    row["lost"] = lost({k: before[k] for k in ("spec", "status")}, {k: after[k] for k in ("spec", "status")})
    row["added"] = added({k: before[k] for k in ("spec", "status")}, {k: after[k] for k in ("spec", "status")})
    kinds.patch(kind, name, {"spec": after["spec"]})  # a no-op patch of the spec, validated as a write
    kinds.patch(kind, name, {"status": after["status"]}, status=True)
    kinds.patch(kind, name, {"metadata": {"annotations": {f"{kinds.group}/upgraded": "true"}}})
    twin = f"{name}-twin"
    kinds.create(kind, twin, after["spec"])
    written = kinds.patch(kind, twin, {"status": after["status"]}, status=True)
    row["twin_lost"] = lost(after["status"], written["status"])
    spec_model, status_model = MODELS[kind]
    spec_model.model_validate(after["spec"])
    _, repairs = repaired(status_model, after["status"])
    row["repairs"] = [message for _, _, message in repairs]
    return row


def test_objects_in_every_phase_survive_the_crd_upgrade(cluster, private, tmp_path):
    kinds = private
    data = yaml.safe_load((UPGRADE_DATA / "objects.yaml").read_text())
    apply_server_side(cluster, kinds, previous_crds(), tmp_path / "previous.yaml")
    stored = store_every_phase(kinds, data)
    assert {k for k, _ in stored} == set(KINDS)
    for kind in KINDS:  # the probes are meaningful: the previous schema refuses them
        assert not probe_accepted(kinds, data, kind), f"the previous {kind} CRD already knows the probe's field"

    apply_server_side(cluster, kinds, current_crds(), tmp_path / "current.yaml")
    for kind in KINDS:  # the API server validates with the new schema once it takes the probe
        wait_for(lambda kind=kind: probe_accepted(kinds, data, kind), 60, f"the new {kind} schema served")

    rows = [check_read_back(kinds, kind, name, before) for (kind, name), before in stored.items()]
    report(f"CRD upgrade from {previous_commit()[:7]} to crds/ ({kinds.group}):")
    report("| kind | phase under the previous CRDs | read back under the new CRDs | patches accepted | fields added |")
    for row in rows:
        kept = "fields kept: yes" if not row["lost"] and not row["twin_lost"] else "fields kept: NO"
        report(f"| {row['kind']} | {row['phase']} | {kept} | yes (spec, status, metadata; new object) | "
               f"{', '.join(row['added']) or '-'} |")  # fmt: skip
    assert [(r["name"], r["lost"]) for r in rows if r["lost"]] == []
    assert [(r["name"], r["twin_lost"]) for r in rows if r["twin_lost"]] == []
    assert [(r["name"], r["repairs"]) for r in rows if r["repairs"]] == []
    phases = {(r["kind"], r["phase"]) for r in rows}
    for kind, crd in previous_crds().items():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        missing = {p for p in schema["properties"]["phase"]["enum"] if (kind, p) not in phases}
        assert not missing, f"{kind}: no object stored in phase {sorted(missing)}"
