"""One version source: the git tags vX.Y.Z (0.1.0 until the first), stamped by release/versioning.py into
the package, the chart and manifests/; and what make release (release/bundle.py) makes of it without
building an image: install.yaml and the chart's values pinning both images by digest."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from slipway_testing.release import load

ROOT = Path(__file__).resolve().parents[3]
DIGESTS = {"operator": "sha256:" + "a" * 64, "workloads": "sha256:" + "b" * 64}


versioning = load("versioning")
bundle = load("bundle")


def test_every_file_agrees_with_the_version_source():
    """The drift test: the package, the chart, manifests/, and every version the docs and samples name."""
    assert versioning.check(ROOT) == []
    version = versioning.stamped(ROOT)
    import slipway
    from slipway.settings import SETTINGS

    assert slipway.__version__ == version
    chart = yaml.safe_load((ROOT / "charts" / "slipway" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version
    workload_image = next(s.default for s in SETTINGS if s.name == "workload_image")
    assert workload_image == f"ghcr.io/slipway-dev/slipway-workloads:{version}"


def copy_stamped(tmp: Path) -> Path:
    for path in {p for p, _ in versioning.STAMPED} | {"docs/install.md", "samples/trainingrun-digits.yaml"}:
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp / path)
    return tmp


def test_stamping_changes_every_stamped_file_and_the_check_names_a_straggler(tmp_path):
    root = copy_stamped(tmp_path)
    before = versioning.stamped(root)
    assert sorted(versioning.stamp("2.3.4", root)) == sorted({p for p, _ in versioning.STAMPED})
    assert versioning.stamped(root) == "2.3.4"
    manifest = (root / "manifests" / "deployment.yaml").read_text()
    assert "slipway-operator:2.3.4" in manifest and "slipway-workloads:2.3.4" in manifest
    stragglers = versioning.disagreements("2.3.4", root)  # the docs and the sample were not stamped
    assert stragglers and all(
        s.startswith(("docs/install.md:", "samples/trainingrun-digits.yaml:")) for s in stragglers
    )
    assert all(s.endswith(f"{before}, not 2.3.4") for s in stragglers)
    assert versioning.stamp("2.3.4", root) == []  # stamping again changes nothing


def test_a_version_that_is_not_major_minor_patch_is_refused(tmp_path):
    root = copy_stamped(tmp_path)
    for bad in ("1.2", "v1.2.3", "1.2.3-rc1", "1.2.3.4"):
        with pytest.raises(ValueError, match="MAJOR.MINOR.PATCH"):
            versioning.stamp(bad, root)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True, timeout=30)  # fmt: skip


def test_the_source_is_the_newest_tag_and_a_tree_behind_it_fails(tmp_path):
    root = copy_stamped(tmp_path)
    versioning.stamp("0.1.0", root)
    for p in root.rglob("*.md"):
        p.unlink()
    (root / "samples" / "trainingrun-digits.yaml").unlink()
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    assert versioning.source(root) == "0.1.0" and versioning.check(root) == []  # no tag: 0.1.0
    git(root, "tag", "v0.2.0")
    git(root, "tag", "v0.10.0")  # newer than 0.2.0 (not by string order)
    git(root, "tag", "not-a-version")
    assert versioning.source(root) == "0.10.0"
    assert [p for p in versioning.check(root) if "make version VERSION=0.10.0" in p]  # the tree is behind
    versioning.stamp("0.10.0", root)
    assert versioning.check(root) == []
    versioning.stamp("0.11.0", root)  # a release being prepared: its commit gets the tag
    assert versioning.check(root) == []


def oci_archive(path: Path, manifests: list[dict[str, str]]) -> Path:
    data = json.dumps({"schemaVersion": 2, "manifests": manifests}).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_the_digest_is_read_from_the_archive_index(tmp_path):
    digest = DIGESTS["operator"]
    assert bundle.digest_of(oci_archive(tmp_path / "one.tar", [{"digest": digest}])) == digest
    with pytest.raises(ValueError, match="2 images"):
        bundle.digest_of(oci_archive(tmp_path / "two.tar", [{"digest": digest}, {"digest": digest}]))
    with pytest.raises(ValueError, match="not a sha256 digest"):
        bundle.digest_of(oci_archive(tmp_path / "bad.tar", [{"digest": "sha256:zz"}]))


def test_install_yaml_is_manifests_with_both_images_by_digest():
    version = versioning.stamped(ROOT)
    text = bundle.install_yaml(ROOT, version, "registry.example/ml", DIGESTS)
    objs = [o for o in yaml.safe_load_all(text) if o]
    kinds = [o["kind"] for o in objs]
    assert kinds[:3] == ["CustomResourceDefinition"] * 3 and kinds[3] == "Namespace"  # one pass applies it
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"} <= set(kinds)
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == f"registry.example/ml/slipway-operator@{DIGESTS['operator']}"
    assert (
        env["SLIPWAY_WORKLOAD_IMAGE"]
        == env["SLIPWAY_FETCH_IMAGE"]
        == (f"registry.example/ml/slipway-workloads@{DIGESTS['workloads']}")
    )
    assert "ghcr.io" not in text


def test_the_chart_values_pin_both_images_by_digest():
    values = yaml.safe_load(bundle.chart_values((ROOT / "charts/slipway/values.yaml").read_text(), "r.example",
                                                DIGESTS))  # fmt: skip
    assert values["image"]["repository"] == "r.example/slipway-operator"
    assert values["image"]["digest"] == DIGESTS["operator"]
    assert values["workloadsImage"] == {"repository": "r.example/slipway-workloads", "tag": "",
                                        "digest": DIGESTS["workloads"]}  # fmt: skip
    with pytest.raises(ValueError, match="slipway-workloads"):
        bundle.chart_values('image:\n  repository: ghcr.io/slipway-dev/slipway-operator\n  digest: ""\n', "r", DIGESTS)
