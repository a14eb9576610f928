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

from functools import partial
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from localkube.wait import wait_for
from slipway.artifact.model import ModelArtifactSpec, ModelArtifactStatus
from slipway.inference.model import InferenceDeploymentSpec, InferenceDeploymentStatus
from slipway.models.base import StatusModel
from slipway.status.writer import repaired
from slipway.training.model import TrainingRunSpec, TrainingRunStatus
from slipway_e2e.deploy import kubectl
from slipway_testing import report
from slipway_testing.crdcopies import (
    KINDS,
    UPGRADE_DATA,
    Copy,
    added,
    apply_server_side,
    current_crds,
    lost,
    previous_commit,
    previous_crds,
    probe_accepted,
    store_every_phase,
)

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
MODELS: dict[str, tuple[type[BaseModel], type[StatusModel]]] = {
    "TrainingRun": (TrainingRunSpec, TrainingRunStatus),
    "ModelArtifact": (ModelArtifactSpec, ModelArtifactStatus),
    "InferenceDeployment": (InferenceDeploymentSpec, InferenceDeploymentStatus),
}


@pytest.fixture
def private(cluster, kube_api, namespace):
    """The private group's CRDs are deleted after the test (and with them its objects)."""
    kinds = Copy(kube_api, namespace)
    yield kinds
    for name in kinds.crd_names():
        kubectl(cluster, "delete", "crd", name, "--ignore-not-found", "--wait=false", check=False)


def check_read_back(kinds: Copy, kind: str, name: str, before: Obj) -> dict[str, Any]:
    """One object after the upgrade: read back, patched, copied to a new object, read by the models."""
    after = kinds.get(kind, name)
    row: dict[str, Any] = {"kind": kind, "name": name, "phase": before["status"]["phase"]}
    row["lost"] = lost({k: before[k] for k in ("spec", "status")}, {k: after[k] for k in ("spec", "status")})
    row["added"] = added({k: before[k] for k in ("spec", "status")}, {k: after[k] for k in ("spec", "status")})
    kinds.patch(kind, name, {"spec": after["spec"]})  # a no-op patch of the spec, validated as a write
    kinds.patch(kind, name, {"status": after["status"]}, status=True)
    kinds.patch(kind, name, {"metadata": {"annotations": {f"{kinds.group}/upgraded": "true"}}})
    # The API server ratchets (Kubernetes 1.33+): the patches above pass even where the new schema
    # refuses a value they leave unchanged. A new object has no old value: all of it is validated.
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
        wait_for(partial(probe_accepted, kinds, data, kind), 60, f"the new {kind} schema served")

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
