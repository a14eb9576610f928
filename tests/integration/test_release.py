"""A release a team can pin: dist/X.Y.Z/ from `make release`, installed from a directory holding
nothing else (no checkout, no registry).

The release directory is copied alone into an empty temporary directory; its SHA256SUMS hold (the
signatures and a tampered copy are tests/security/test_release_signatures.py's); the
packaged chart renders both images by the digests read from the archives, and the API server accepts
what it renders; install.yaml, with only the namespace changed (what docs/install.md tells a user to
change), is applied server-side into a fresh namespace: the CRDs are established, every object
exists and the Deployment names both images by those digests. A team's push, as docs/install.md gives it
(`skopeo copy --preserve-digests` of each archive), to a registry on loopback (Debian's docker-registry):
the registry serves each image, by tag and by digest, under the digest install.yaml names.

On the local test cluster pods are local processes started by the node agent, not containers from
the images: nothing here pulls or runs an image. The operator's Deployment is applied with 0
replicas: a second operator for all namespaces would reconcile the other tests' objects (the Helm
install test of test_chart.py runs the chart's operator, one test at a time).

dist/X.Y.Z/ is written once per session when missing or stale (`make release`): from the archives
`make image` left in dist/ when they are there (seconds), else with both images built (minutes).
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from slipway_e2e.deploy import kubectl
from slipway_testing import report
from slipway_testing.registry import Registry, loopback_registry
from slipway_testing.release import load, release_alone

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".cache" / "helm" / "helm"
Obj = dict[str, Any]
KEPT = {"CustomResourceDefinition", "PriorityClass"}  # shared with the session's other tests


versioning = load("versioning")
bundle = load("bundle")
VERSION = versioning.stamped(ROOT)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """dist/VERSION/ copied alone into an empty directory, and the digests read from its archives."""
    here = tmp_path_factory.mktemp("release")
    _, digests = release_alone(here)
    return here, digests


def objects(text: str) -> list[Obj]:
    return [o for o in yaml.safe_load_all(text) if o]


def pinned_images(objs: list[Obj]) -> tuple[str, dict[str, str]]:
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["image"], {e["name"]: e.get("value") for e in container["env"]}


def assert_pinned(objs: list[Obj], digests: dict[str, str], registry: str = bundle.DEFAULT_REGISTRY) -> None:
    image, env = pinned_images(objs)
    assert image == f"{registry}/slipway-operator@{digests['operator']}"
    workloads = f"{registry}/slipway-workloads@{digests['workloads']}"
    assert env["SLIPWAY_WORKLOAD_IMAGE"] == env["SLIPWAY_FETCH_IMAGE"] == workloads


def test_the_release_holds_every_file_and_its_sums(release):
    here, digests = release
    names = {p.name for p in here.iterdir()}
    assert names == {
        f"slipway-operator-{VERSION}.oci.tar",
        f"slipway-workloads-{VERSION}.oci.tar",
        "install.yaml",
        f"slipway-{VERSION}.tgz",
        f"slipway-crds-{VERSION}.tgz",
        f"slipway_operator-{VERSION}-py3-none-any.whl",
        "kubectl-slipway.pyz",
        "kubectl-slipway.tar.gz",
        "plugin.yaml",
        "images.txt",
        f"slipway-operator-{VERSION}.sbom.cdx.json",
        f"slipway-workloads-{VERSION}.sbom.cdx.json",
        f"slipway-base-{VERSION}.packages.txt",
        "SHA256SUMS",
        "SHA256SUMS.sig",
        f"slipway-operator-{VERSION}.oci.tar.sig",
        f"slipway-workloads-{VERSION}.oci.tar.sig",
    }
    done = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=here, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": OK") == len(names) - 4  # all but SHA256SUMS and the signatures
    listed = dict(line.split()[:2] for line in (here / "images.txt").read_text().splitlines())
    assert listed == {f"slipway-{k}": f"{bundle.DEFAULT_REGISTRY}/slipway-{k}@{digests[k]}" for k in bundle.KINDS}
    report("release: " + ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in sorted(here.iterdir())))


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry of a team's own, Debian's docker-registry (the CNCF distribution) on loopback."""
    with loopback_registry(tmp_path) as served:
        yield served


def test_a_team_pushes_the_archives_to_its_registry_and_the_digests_hold(release, registry):
    """docs/install.md's push: skopeo copy --preserve-digests of each archive; the registry serves each image
    under the digest install.yaml and the chart name, by tag and by digest."""
    here, digests = release
    for kind, digest in digests.items():
        repo = f"{registry.host}/team/slipway-{kind}"
        took = registry.push(here / f"slipway-{kind}-{VERSION}.oci.tar", f"team/slipway-{kind}", VERSION)
        accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
        by_tag = httpx.get(f"http://{registry.host}/v2/team/slipway-{kind}/manifests/{VERSION}", headers=accept)
        assert by_tag.status_code == 200, by_tag.text
        assert by_tag.headers["Docker-Content-Digest"] == digest
        assert "sha256:" + hashlib.sha256(by_tag.content).hexdigest() == digest
        by_digest = httpx.get(f"http://{registry.host}/v2/team/slipway-{kind}/manifests/{digest}", headers=accept)
        assert by_digest.status_code == 200 and by_digest.content == by_tag.content
        manifest = by_tag.json()
        for blob in [manifest["config"], *manifest["layers"]]:  # every blob pushed, not only the manifest
            head = httpx.head(f"http://{registry.host}/v2/team/slipway-{kind}/blobs/{blob['digest']}")
            assert head.status_code == 200 and int(head.headers["Content-Length"]) == blob["size"], blob
        report(f"release: slipway-{kind} pushed with skopeo in {took:.1f}s, served as {repo}@{digest}")


def helm_template(chart: Path, namespace: str, *sets: str) -> list[Obj]:
    home = HELM.parent / "home"
    env = {f"HELM_{d.upper()}_HOME": str(home / d) for d in ("cache", "config", "data")}
    args = [str(HELM), "template", "slipway", str(chart), "-n", namespace, "--include-crds"]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env})
    assert done.returncode == 0, done.stderr
    return objects(done.stdout)


def test_the_packaged_chart_pins_both_images_and_carries_its_crds(release):
    here, digests = release
    chart = here / f"slipway-{VERSION}.tgz"
    objs = helm_template(chart, "slipway-system")
    assert_pinned(objs, digests)
    assert not [o for o in objs if o["kind"] == "CustomResourceDefinition"]  # slipway-crds owns them by default
    with_crds = helm_template(chart, "slipway-system", "crds.install=true")  # its files/crds/, links resolved
    crds = sorted(o["metadata"]["name"] for o in with_crds if o["kind"] == "CustomResourceDefinition")
    assert crds == ["inferencedeployments.slipway.dev", "modelartifacts.slipway.dev", "trainingruns.slipway.dev"]
    in_crds_chart = helm_template(here / f"slipway-crds-{VERSION}.tgz", "slipway-system")
    assert sorted(o["metadata"]["name"] for o in in_crds_chart if o["kind"] == "CustomResourceDefinition") == crds
    # A team's registry: the repository changes, the digest stays.
    assert_pinned(helm_template(chart, "slipway-system", "image.repository=registry.example/ml/slipway-operator",
                                "workloadsImage.repository=registry.example/ml/slipway-workloads"),
                  digests, "registry.example/ml")  # fmt: skip


@pytest.mark.cluster
def test_the_api_server_accepts_the_packaged_chart(release, cluster, namespace):
    here, _ = release
    objs = helm_template(here / f"slipway-{VERSION}.tgz", namespace, "namePrefix=rel-dry")
    env_kubeconfig = {"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(ROOT / ".cache" / "controlplane" / "kubectl"), "apply", "--dry-run=server", "-f", "-"],
                          input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=120,
                          env=env_kubeconfig)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(objs), done.stdout


def key(o: Obj) -> tuple[str, str, str]:
    return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]


def exists(cluster: Any, o: Obj) -> bool:
    ns = ["-n", o["metadata"]["namespace"]] if o["metadata"].get("namespace") else []
    kind = f"{o['kind'].lower()}.{o['apiVersion'].split('/')[0]}" if "/" in o["apiVersion"] else o["kind"].lower()
    return kubectl(cluster, "get", kind, o["metadata"]["name"], *ns, check=False).returncode == 0


@pytest.mark.cluster
@pytest.mark.serial  # its ClusterRoleBinding slipway-operator is the kustomize install's too
def test_install_yaml_applies_from_the_release_alone(release, cluster):
    here, digests = release
    system = f"slipway-rel-{secrets.token_hex(2)}"
    # What docs/install.md tells a user to change for another namespace: slipway-system, throughout.
    text = (here / "install.yaml").read_text().replace("slipway-system", system)
    objs = objects(text)
    before = {key(o) for o in objs if not o["metadata"].get("namespace") and exists(cluster, o)}
    # Not started here (the module's docstring says why): the Deployment alone gets 0 replicas.
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    deployment["spec"]["replicas"] = 0
    (here / "install-here.yaml").write_text(yaml.safe_dump_all(objs))
    start = time.monotonic()
    try:
        applied = kubectl(cluster, "apply", "--server-side", "-f", str(here / "install-here.yaml"), check=False)
        assert applied.returncode == 0, applied.stderr
        report(f"release: install.yaml applied server-side ({len(objs)} objects) in {time.monotonic() - start:.1f}s")
        for crd in (o["metadata"]["name"] for o in objs if o["kind"] == "CustomResourceDefinition"):
            kubectl(cluster, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s", timeout=70)
        missing = [key(o) for o in objs if not exists(cluster, o)]
        assert missing == []
        live = yaml.safe_load(kubectl(cluster, "-n", system, "get", "deployment", "slipway-operator", "-o",
                                      "yaml").stdout)  # fmt: skip
        assert_pinned([live], digests)
        binding = yaml.safe_load(kubectl(cluster, "get", "clusterrolebinding", "slipway-operator", "-o", "yaml").stdout)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slipway-operator", "namespace": system}]
    finally:
        made = [o for o in objs if o["kind"] not in KEPT | {"Namespace"} and key(o) not in before]
        made = [o for o in made if not o["metadata"].get("namespace")]  # the namespace's go with it
        if made:  # deleted, and waited for; what the cluster had before is left as it was
            (here / "made.yaml").write_text(yaml.safe_dump_all(made))
            kubectl(cluster, "delete", "--ignore-not-found", "-f", str(here / "made.yaml"), check=False)
        kubectl(cluster, "delete", "namespace", system, "--wait=false", check=False)
