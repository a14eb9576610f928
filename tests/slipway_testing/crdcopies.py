"""Slipway's CRDs, previous and current, copied into a private API group: a test may install, upgrade
and delete them on the shared cluster without touching the real ``slipway.dev`` kinds other tests
use. And the comparison of an object as stored with the same object read back."""

from __future__ import annotations

import copy
import secrets
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.wait import wait_for
from slipway_e2e.deploy import kubectl

ROOT = Path(__file__).resolve().parents[2]
UPGRADE_DATA = ROOT / "tests" / "data" / "crd-upgrade"
PREVIOUS = UPGRADE_DATA / "previous"
KINDS = ("TrainingRun", "ModelArtifact", "InferenceDeployment")
VERSION = "v1alpha1"
Obj = dict[str, Any]


def previous_commit() -> str:
    """The commit whose crds/ tests/data/crd-upgrade/previous/ holds (first line of its COMMIT file)."""
    return (PREVIOUS / "COMMIT").read_text().split()[0]


def load_crds(directory: Path) -> dict[str, dict[str, Any]]:
    """The CRDs of ``directory`` (slipway.dev_*.yaml) by kind."""
    docs = [yaml.safe_load(p.read_text()) for p in sorted(directory.glob("slipway.dev_*.yaml"))]
    return {d["spec"]["names"]["kind"]: d for d in docs}


def previous_crds() -> dict[str, dict[str, Any]]:
    return load_crds(PREVIOUS)


def current_crds() -> dict[str, dict[str, Any]]:
    return load_crds(ROOT / "crds")


def git_crd(commit: str, name: str) -> str | None:
    """crds/<name> as ``commit`` has it, or None where git or that commit is not at hand."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:crds/{name}"], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
    except FileNotFoundError:
        return None
    return done.stdout if done.returncode == 0 else None


def private_names(kind: str, tag: str) -> dict[str, str]:
    """The names a kind takes in the private copy: prefixed, so that neither ``kubectl get trainingruns``
    nor a short name nor the ``slipway`` category of another test ever resolves to the copy."""
    return {
        "kind": f"{tag.capitalize()}{kind}",
        "listKind": f"{tag.capitalize()}{kind}List",
        "plural": f"{tag}{kind.lower()}s",
        "singular": f"{tag}{kind.lower()}",
    }


def privatize(crd: dict[str, Any], group: str, tag: str) -> dict[str, Any]:
    """A copy of ``crd`` served in ``group`` under names prefixed with ``tag`` (no short names, no
    categories); the versions, schemas, rules and subresources are left exactly as they are."""
    out = copy.deepcopy(crd)
    names = private_names(crd["spec"]["names"]["kind"], tag)
    out["spec"]["group"] = group
    out["spec"]["names"] = names
    out["metadata"] = {"name": f"{names['plural']}.{group}"}
    return out


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every scalar (and empty list or map) of ``value`` by its path, such as ``status.gates[0].passed``."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}.{key}" if path else key).items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, f"{path}[{i}]").items()}
    return {path: value}


def lost(stored: Any, read: Any) -> list[str]:
    """The paths of ``stored`` that ``read`` does not have with the same value (pruned, changed)."""
    after = leaves(read)
    return [f"{path}: {value!r} -> {after.get(path, '<missing>')!r}" for path, value in leaves(stored).items()
            if path not in after or after[path] != value]  # fmt: skip


def added(stored: Any, read: Any) -> list[str]:
    """The paths ``read`` has and ``stored`` has not (defaults of the new schema)."""
    before = leaves(stored)
    return sorted(path for path in leaves(read) if path not in before)


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


def apply_server_side(cluster: Any, kinds: Copy, crds: dict[str, Obj], path: Path) -> None:
    """`kubectl apply --server-side` of the private copies of ``crds``; waits until each kind is served."""
    path.write_text(yaml.safe_dump_all([privatize(crds[kind], kinds.group, kinds.tag) for kind in KINDS]))
    done = kubectl(cluster, "apply", "--server-side", "-f", str(path), check=False)
    assert done.returncode == 0, f"kubectl apply --server-side -f {path.name}: {done.stderr}"
    wait_served(cluster, kinds)


def wait_served(cluster: Any, kinds: Copy) -> None:
    """Until the copy's CRDs are Established and each kind answers a list."""
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
