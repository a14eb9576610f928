"""A release tampered with between Slipway and a team: dist/X.Y.Z/ of `make release` (signed with the tests'
own key, release/supply.py), copied alone into an empty directory as a team receives it, then forged the
ways a mirror or a man in the middle could: a sum in SHA256SUMS swapped for an attacker's archive, an
archive with bytes of the attacker's, SHA256SUMS signed by the attacker's own key, and a signature the
release key made for another purpose (another SSHSIG namespace) replayed. The verification docs/install.md
gives (ssh-keygen -Y verify with the release key's public half, then sha256sum -c) accepts each genuine file
and refuses every forgery: counted. The SBOMs and the base's package list of the same release name what
the images hold. No cluster: the release is files."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from slipway_testing.cluster import report
from slipway_testing.release import load, release_alone, signing_key

supply = load("supply")


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    here = tmp_path_factory.mktemp("release")
    version, _ = release_alone(here)
    return here, version


def sums_hold(here: Path) -> bool:
    done = subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=here,
                          capture_output=True, timeout=300)  # fmt: skip
    return done.returncode == 0


def test_a_tampered_release_is_refused_and_the_genuine_one_verifies(release, tmp_path):
    here, version = release
    key, public = signing_key()
    operator = f"slipway-operator-{version}.oci.tar"
    genuine = {name: supply.verify(public, here / name) for name in
               ["SHA256SUMS", operator, f"slipway-workloads-{version}.oci.tar"]}  # fmt: skip
    assert all(ok for ok, _ in genuine.values()), genuine
    assert sums_hold(here)

    forged = tmp_path / "forged"
    forged.mkdir()
    # 1. an attacker's archive in place of the operator's, with bytes of its own appended
    shutil.copy2(here / operator, forged / operator)
    with (forged / operator).open("ab") as f:
        f.write(b"\0attacker")
    shutil.copy2(here / f"{operator}.sig", forged / f"{operator}.sig")
    # 2. SHA256SUMS naming that archive's sum, under the genuine signature
    sums = (here / "SHA256SUMS").read_text()
    theirs = hashlib.sha256((forged / operator).read_bytes()).hexdigest()
    (forged / "SHA256SUMS").write_text(sums.replace(sums.split()[sums.split().index(operator) - 1], theirs))
    shutil.copy2(here / "SHA256SUMS.sig", forged / "SHA256SUMS.sig")
    # 3. SHA256SUMS signed by the attacker's own key
    attacker = tmp_path / "attacker"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(attacker)], check=True)
    (tmp_path / "theirs").mkdir()
    own = tmp_path / "theirs" / "SHA256SUMS"
    own.write_text((forged / "SHA256SUMS").read_text())
    supply.sign(attacker, own)
    # 4. the release key's signature of the same bytes in another namespace (made for something else), replayed
    replay = tmp_path / "replay"
    replay.mkdir()
    shutil.copy2(here / "SHA256SUMS", replay / "SHA256SUMS")
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", "file", str(replay / "SHA256SUMS")],
                   check=True, capture_output=True)  # fmt: skip

    attempts = {
        "archive with the attacker's bytes": supply.verify(public, forged / operator),
        "SHA256SUMS naming the attacker's archive": supply.verify(public, forged / "SHA256SUMS"),
        "SHA256SUMS signed by the attacker's key": supply.verify(public, own),
        "the release key's signature for another namespace": supply.verify(public, replay / "SHA256SUMS"),
    }
    accepted = [what for what, (ok, _) in attempts.items() if ok]
    assert not accepted, f"forgeries accepted: {accepted}"
    assert all("could not verify signature" in said.lower() for _, said in attempts.values()), attempts
    for what, (_, said) in attempts.items():
        report(f"release signatures: {what}: refused ({said.splitlines()[-1]})")
    # Without the signature, sha256sum alone also refuses the forged archive against the genuine sums.
    shutil.copy2(here / "SHA256SUMS", forged / "SHA256SUMS")
    for name in (here / "SHA256SUMS").read_text().split()[1::2]:
        if not (forged / name).exists():
            (forged / name).hardlink_to(here / name)
    assert not sums_hold(forged)
    report(
        f"release signatures: {len(genuine)} genuine files verified, {len(attempts)} forgeries refused, "
        f"{len(accepted)} accepted; sha256sum -c refused the forged archive"
    )


def test_the_sboms_and_the_base_packages_name_what_the_images_hold(release):
    here, version = release
    pinned = load("lock").pins((supply.ROOT / "constraints.txt").read_text())
    for kind in ("operator", "workloads"):
        sbom = json.loads((here / f"slipway-{kind}-{version}.sbom.cdx.json").read_text())
        assert sbom["bomFormat"] == "CycloneDX", sbom.keys()
        found = {(c.get("purl") or "").split("@")[0]: c.get("version") for c in sbom["components"]}
        assert found.get("pkg:pypi/kopf") == pinned["kopf"], sorted(found)[:20]
        assert found.get("pkg:pypi/slipway-operator") == version
        assert any(purl.startswith("pkg:deb/debian/python3.11") for purl in found), sorted(found)[:20]
        assert ("pkg:pypi/onnxruntime" in found) == (kind == "workloads")
        report(f"release: slipway-{kind} SBOM lists {len(found)} components")
    packages = (here / f"slipway-base-{version}.packages.txt").read_text()
    assert "bookworm-security" in packages, packages[:400]
    installed = [line.split()[1] for line in packages.splitlines() if line.startswith("ii ")]
    assert "python3" in installed and "ca-certificates" in installed, installed
    report(f"release: the base's package list: {len(installed)} Debian packages, {packages.splitlines()[0]}")
