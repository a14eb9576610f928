"""What ships: the slipway-operator wheel, built here (pip wheel --no-deps, offline, from a clean copy
of the sources), file by file. It holds the operator package and its metadata, nothing of the local
test cluster (localkube), the demo (slipway_e2e) or the tests; those are the development-only
distribution of e2e/pyproject.toml. The operator image's file list is checked by make image itself
(images/check.py, a step that fails the build)."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TEST_CODE = {"localkube", "slipway_e2e", "tests", "conftest.py", "slipway_testing", "slipway_testing.py", "e2e"}


def dist_info(wheel: zipfile.ZipFile) -> str:
    """The wheel's .dist-info folder (its name carries the version, read from pyproject.toml)."""
    (folder,) = {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info")}
    return folder


def build(src: Path, out: Path) -> zipfile.ZipFile:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    str(src), "-w", str(out)], check=True, timeout=120)  # fmt: skip
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="module")
def operator_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[zipfile.ZipFile, set[str]]:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "operator" / "slipway", src / "operator" / "slipway",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    sources = {
        f"slipway/{p.relative_to(src / 'operator' / 'slipway')}" for p in (src / "operator" / "slipway").rglob("*.py")
    }
    return build(src, tmp_path_factory.mktemp("wheel")), sources


def test_the_wheel_is_the_operator_package_alone(operator_wheel):
    wheel, sources = operator_wheel
    names, meta = wheel.namelist(), dist_info(wheel)
    assert meta.startswith("slipway_operator-")
    assert [n for n in names if not n.startswith(("slipway/", f"{meta}/"))] == []
    assert [n for n in names if TEST_CODE & set(n.split("/"))] == []
    assert {n for n in names if n.startswith("slipway/")} == sources  # every module, and no other file
    assert wheel.read(f"{meta}/top_level.txt").decode().split() == ["slipway"]


def test_the_distribution_is_named_slipway_operator(operator_wheel):
    """`slipway` on the package index is an unrelated project: pip and pipx install slipway-operator,
    which imports as slipway and brings the kubectl plugin."""
    wheel, _ = operator_wheel
    meta = email.message_from_bytes(wheel.read(f"{dist_info(wheel)}/METADATA"))
    assert meta["Name"] == "slipway-operator"
    assert "workloads" in meta.get_all("Provides-Extra")
    scripts = wheel.read(f"{dist_info(wheel)}/entry_points.txt").decode()
    assert "kubectl-slipway = slipway.cli.main:main" in scripts and "slipway = slipway.__main__:main" in scripts


def test_the_test_cluster_is_a_distribution_of_its_own(tmp_path):
    """make install installs e2e/ beside the operator (editable): localkube and slipway_e2e, and
    nothing of the operator."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "e2e", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    wheel = build(src, tmp_path / "wheel")
    packages = {n.split("/")[0] for n in wheel.namelist() if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"localkube", "slipway_e2e"}
    assert email.message_from_bytes(wheel.read(f"{dist_info(wheel)}/METADATA"))["Name"] == "slipway-testcluster"
