"""charts/slipway-crds, the chart of Slipway's CRDs: rendered as templates (so `helm upgrade`
applies a new schema, which Helm never does for a chart's crds/ directory), each kept on uninstall
(helm.sh/resource-policy: keep), the same CRDs as crds/. One owner: the operator chart renders them
only with crds.install=true, by the same helper, and has no crds/ of its own.

On the local cluster the chart is installed as a private copy (its CRDs in a group of the test's
own, see slipway_testing.crdcopies) with the previous CRDs, upgraded to crds/ by `helm upgrade`
with objects stored, and uninstalled: the CRDs and the objects stay. CRDs first created by
`kubectl apply --server-side` (kustomize, install.yaml, or the slipway chart's crds/) are adopted
with `--take-ownership`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from localkube.wait import wait_for
from slipway_e2e.deploy import kubectl
from slipway_testing.crdcopies import (
    KINDS,
    UPGRADE_DATA,
    Copy,
    apply_server_side,
    current_crds,
    lost,
    previous_crds,
    privatize,
    probe_accepted,
    store_every_phase,
    wait_served,
)

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".cache" / "helm" / "helm"
CHART = ROOT / "charts" / "slipway-crds"
OPERATOR_CHART = ROOT / "charts" / "slipway"
KEEP = {"helm.sh/resource-policy": "keep"}
Obj = dict[str, Any]


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the Helm built by `make helm`, with its own home; on failure (check), raise with its stderr."""
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make helm`", pytrace=False)
    home = HELM.parent / "home"
    env = {**os.environ, **{f"HELM_{d.upper()}_HOME": str(home / d) for d in ("cache", "config", "data")}}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run([str(HELM), *args], env=env, capture_output=True, text=True, timeout=180)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return done


def rendered(chart: Path = CHART) -> dict[str, Obj]:
    """`helm template` of the chart (no --include-crds: these CRDs are templates), by name."""
    docs = yaml.safe_load_all(helm("template", "slipway-crds", str(chart)).stdout)
    return {d["metadata"]["name"]: d for d in docs if d}


def test_the_crd_chart_lints_clean():
    out = helm("lint", "--strict", str(CHART)).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out and "[WARNING]" not in out, out


def test_the_crd_chart_renders_the_crds_of_crds_dir_as_templates_kept_on_uninstall():
    objs = rendered()
    assert set(objs) == {f"{crd['spec']['names']['plural']}.slipway.dev" for crd in current_crds().values()}
    assert not (CHART / "crds").exists()  # Helm would install those once and never upgrade them
    for crd in current_crds().values():
        ours = objs[crd["metadata"]["name"]]
        assert ours["metadata"]["annotations"] == KEEP, ours["metadata"]
        assert ours["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert {k: v for k, v in ours.items() if k != "metadata"} == {k: v for k, v in crd.items() if k != "metadata"}


def crd_names() -> set[str]:
    return {crd["metadata"]["name"] for crd in current_crds().values()}


def crds_rendered(chart: Path, *sets: str) -> dict[str, Obj]:
    """The CRDs a release of ``chart`` would own (templates and any crds/ directory), by name."""
    args = ["template", "slipway", str(chart), "-n", "slipway-system", "--include-crds"]
    docs = yaml.safe_load_all(helm(*args, *(a for s in sets for a in ("--set", s))).stdout)
    return {d["metadata"]["name"]: d for d in docs if d and d["kind"] == "CustomResourceDefinition"}


@pytest.mark.parametrize(
    ("path", "releases"),
    [
        ("two charts (the default)", [(CHART, ()), (OPERATOR_CHART, ())]),
        ("one chart, crds.install=true", [(OPERATOR_CHART, ("crds.install=true",))]),
    ],
)
def test_each_crd_has_exactly_one_owning_release(path, releases):
    """Helm's install paths (docs/install.md, docs/how-to/gitops.md): every CRD of crds/ is rendered
    by exactly one release, so neither Helm nor Argo CD ever has two releases own one CRD."""
    owners: dict[str, list[str]] = {}
    for chart, sets in releases:
        for name in crds_rendered(chart, *sets):
            owners.setdefault(name, []).append(chart.name)
    assert {n: len(o) for n, o in owners.items()} == dict.fromkeys(crd_names(), 1), (path, owners)


def test_the_operator_chart_renders_the_crds_only_when_asked_by_the_shared_helper():
    assert not (OPERATOR_CHART / "crds").exists()  # Helm would install those on every first install
    assert crds_rendered(OPERATOR_CHART) == {}
    # files/crds/ links to crds/: no copy of its own to drift.
    links = {p.name: p for p in (OPERATOR_CHART / "files" / "crds").iterdir()}
    assert set(links) == {p.name for p in (ROOT / "crds").glob("slipway.dev_*.yaml")}
    assert all(p.is_symlink() and p.resolve() == ROOT / "crds" / name for name, p in links.items())
    helper = "templates/_crds.tpl"
    assert (OPERATOR_CHART / helper).read_text() == (CHART / helper).read_text(), "the two charts' helpers differ"
    ours, theirs = crds_rendered(OPERATOR_CHART, "crds.install=true"), rendered()
    assert set(ours) == set(theirs) == crd_names()
    for name, crd in ours.items():
        assert crd["metadata"]["annotations"] == KEEP
        assert crd["metadata"]["labels"]["helm.sh/chart"].startswith("slipway-")
        assert {k: v for k, v in crd.items() if k != "metadata"} == {
            k: v for k, v in theirs[name].items() if k != "metadata"
        }
    kept_off = crds_rendered(OPERATOR_CHART, "crds.install=true", "crds.keep=false")
    assert all("annotations" not in crd["metadata"] for crd in kept_off.values())


def test_an_upgrade_reusing_values_without_a_crds_value_renders_none():
    """`helm upgrade --reuse-values` from a release made before crds.install: Helm then renders with the
    old chart's values, which have no crds (here: the value removed), so the release owns no CRD."""
    out = helm("template", "slipway", str(OPERATOR_CHART), "--set", "crds=null").stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert docs and not [d for d in docs if d["kind"] == "CustomResourceDefinition"]


def private_chart(kinds: Copy, crds: dict[str, Obj], where: Path) -> Path:
    """A copy of charts/slipway-crds whose files/ are ``crds`` in the test's private group."""
    shutil.copytree(CHART, where)
    for path in (where / "files").glob("*.yaml"):
        path.unlink()
    for kind in KINDS:
        doc = privatize(crds[kind], kinds.group, kinds.tag)
        (where / "files" / f"slipway.dev_{doc['spec']['names']['plural']}.yaml").write_text(yaml.safe_dump(doc))
    return where


def served_schema(cluster: Any, name: str) -> Obj:
    crd = json.loads(kubectl(cluster, "get", "crd", name, "-o", "json").stdout)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


@pytest.fixture
def private(cluster, kube_api, namespace):
    kinds = Copy(kube_api, namespace)
    yield kinds
    helm("uninstall", kinds.tag, "-n", namespace, "--ignore-not-found", kubeconfig=cluster.kubeconfig, check=False)
    for name in kinds.crd_names():
        kubectl(cluster, "delete", "crd", name, "--ignore-not-found", "--wait=false", check=False)


def upgraded_and_kept(cluster, kube_api, kinds: Copy, stored: dict[tuple[str, str], Obj]) -> None:
    """After `helm upgrade` to crds/ (in the private group): the API server serves the new
    schema, every stored object reads back whole; `helm uninstall` keeps the CRDs and the objects."""
    data = yaml.safe_load((UPGRADE_DATA / "objects.yaml").read_text())
    wait_served(cluster, kinds)
    for kind in KINDS:
        wait_for(partial(probe_accepted, kinds, data, kind), 60, f"the new {kind} schema served")
        name = f"{kinds.plural(kind)}.{kinds.group}"
        want = privatize(current_crds()[kind], kinds.group, kinds.tag)["spec"]["versions"][0]["schema"]
        assert served_schema(cluster, name) == want["openAPIV3Schema"], f"{name}: not the schema of crds/"
    for (kind, name), before in stored.items():
        after = kinds.get(kind, name)
        assert lost(before["status"], after["status"]) == [], f"{kind} {name}"
    helm("uninstall", kinds.tag, "-n", kinds.namespace, "--wait", kubeconfig=cluster.kubeconfig)
    ext = client.ApiextensionsV1Api(kube_api)
    for name in kinds.crd_names():
        meta = ext.read_custom_resource_definition(name).metadata
        assert meta is not None and meta.deletion_timestamp is None, f"{name} deleted with the release"
    for kind, name in stored:
        assert kinds.get(kind, name)["status"]["phase"], f"{kind} {name} gone with the release"


@pytest.mark.cluster
def test_helm_upgrade_applies_new_crds_and_uninstall_keeps_them(cluster, kube_api, private, tmp_path):
    kinds = private
    data = yaml.safe_load((UPGRADE_DATA / "objects.yaml").read_text())
    old = private_chart(kinds, previous_crds(), tmp_path / "previous")
    new = private_chart(kinds, current_crds(), tmp_path / "current")
    helm("install", kinds.tag, str(old), "-n", kinds.namespace, "--wait", kubeconfig=cluster.kubeconfig)
    wait_served(cluster, kinds)
    stored = store_every_phase(kinds, data)
    helm("upgrade", kinds.tag, str(new), "-n", kinds.namespace, "--wait", kubeconfig=cluster.kubeconfig)
    upgraded_and_kept(cluster, kube_api, kinds, stored)


@pytest.mark.cluster
def test_crds_applied_before_the_crd_chart_are_adopted_with_take_ownership(cluster, kube_api, private, tmp_path):
    """An install from before the CRD chart (kustomize, install.yaml, the slipway chart's crds/):
    Helm refuses CRDs it does not own, and --take-ownership adopts them and upgrades them."""
    kinds = private
    data = yaml.safe_load((UPGRADE_DATA / "objects.yaml").read_text())
    apply_server_side(cluster, kinds, previous_crds(), tmp_path / "previous.yaml")
    stored = store_every_phase(kinds, data)
    new = private_chart(kinds, current_crds(), tmp_path / "current")
    install = ["upgrade", "--install", kinds.tag, str(new), "-n", kinds.namespace, "--wait"]
    refused = helm(*install, kubeconfig=cluster.kubeconfig, check=False)
    assert refused.returncode != 0 and "exists and cannot be imported" in refused.stderr, refused.stderr
    helm(*install, "--take-ownership", kubeconfig=cluster.kubeconfig)
    upgraded_and_kept(cluster, kube_api, kinds, stored)
