"""The release tools (release/versioning.py, release/bundle.py, release/supply.py) as modules, for the tests
(they are scripts of the repository, not part of the package), and dist/X.Y.Z/ of `make release` copied
alone into a directory holding nothing else, as a team receives it. The tests sign it with a key of their
own (``signing_key``: an ed25519 key made once under .cache/release-test/), as the release key would,
and build it from the working tree as it is (--allow-dirty: a development build)."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from slipway_testing.cluster import report

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".cache" / "helm" / "helm"
KEY = ROOT / ".cache" / "release-test" / "signing-key"


def load(name: str) -> ModuleType:
    """``release/<name>.py`` imported once (its siblings importable by name, as when it runs)."""
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(ROOT / "release"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "release" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def signing_key() -> tuple[Path, str]:
    """The tests' release key (made once: an ed25519 OpenSSH key without a passphrase) and its public half."""
    if not KEY.exists():
        KEY.parent.mkdir(parents=True, exist_ok=True)
        partial = KEY.with_name("partial")
        for path in (partial, partial.with_suffix(".pub")):
            path.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "slipway-tests", "-f", str(partial)],
                       check=True)  # fmt: skip
        partial.with_suffix(".pub").rename(KEY.with_name(KEY.name + ".pub"))
        partial.rename(KEY)
    return KEY, KEY.with_name(KEY.name + ".pub").read_text()


def fresh(out: Path, version: str) -> bool:
    """dist/VERSION/ is there, whole, signed by the tests' key, and its install.yaml is what the tree makes of
    its archives."""
    bundle = load("bundle")
    archives = [out / f"slipway-{k}-{version}.oci.tar" for k in bundle.KINDS]
    sboms = [out / f"slipway-{k}-{version}.sbom.cdx.json" for k in bundle.KINDS]
    if not all(a.exists() for a in [*archives, *sboms, out / "install.yaml", out / f"slipway-crds-{version}.tgz",
                                    out / "SHA256SUMS.sig"]):  # fmt: skip
        return False
    plugin = load("plugin")  # the single-file plugin: listed in SHA256SUMS, and what the tree builds now
    zipapp = out / plugin.ZIPAPP
    if f"  {plugin.MANIFEST}\n" not in (out / "SHA256SUMS").read_text() or not zipapp.exists():
        return False
    if zipapp.read_bytes() != plugin.zipapp_bytes(ROOT / "operator" / "slipway"):
        return False
    if not load("supply").verify(signing_key()[1], out / "SHA256SUMS")[0]:
        return False
    digests = {k: bundle.digest_of(a) for k, a in zip(bundle.KINDS, archives, strict=True)}
    return bool((out / "install.yaml").read_text() == bundle.install_yaml(ROOT, version, bundle.DEFAULT_REGISTRY,
                                                                          digests))  # fmt: skip


def build_release(out: Path, version: str) -> None:
    """dist/VERSION/ as `make release` writes it, when missing or stale: from the archives `make image` left
    in dist/ when they are there (seconds), else both images built first (minutes)."""
    if fresh(out, version):
        return
    made = [ROOT / "dist" / f"slipway-{k}-{version}.oci.tar" for k in load("bundle").KINDS]
    made.append(ROOT / "dist" / f"slipway-base-{version}.packages.txt")  # the base's package list
    reuse = all(path.exists() for path in made) and any(
        (ROOT / "build" / "image" / "operator" / "slipway").glob(f"slipway_operator-{version}-*.whl")
    )
    args, what = (["--skip-images"], "from make image's archives") if reuse else ([], "with both images built")
    args += ["--signing-key", str(signing_key()[0]), "--allow-dirty"]
    start = time.monotonic()
    subprocess.run([sys.executable, str(ROOT / "release" / "bundle.py"), version, *args], cwd=ROOT, check=True,
                   timeout=1500)  # fmt: skip
    report(f"release: dist/{version}/ written {what} in {time.monotonic() - start:.0f}s")


def release_alone(here: Path) -> tuple[str, dict[str, str]]:
    """dist/VERSION/ (the tree's version; written first when missing or stale, one writer at a time)
    copied alone into the empty directory ``here``: the version, and each image's digest read from its
    archive ({"operator": "sha256:...", "workloads": ...})."""
    version = load("versioning").stamped(ROOT)
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make helm`", pytrace=False)
    out = ROOT / "dist" / version
    out.parent.mkdir(exist_ok=True)
    with (ROOT / "dist" / ".release.lock").open("w") as lock:  # one build, whichever worker comes first
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_release(out, version)
    for path in out.iterdir():
        shutil.copy2(path, here / path.name)
    bundle = load("bundle")
    return version, {k: bundle.digest_of(here / f"slipway-{k}-{version}.oci.tar") for k in bundle.KINDS}


def layers_of(archive: Path) -> tuple[str, dict[str, str]]:
    """The one image of an OCI archive: its config's digest, and each layer's digest with the chain ID
    its unpacked snapshot is named by on a node (``sha256:...``, the OCI image spec's ChainID)."""
    with tarfile.open(archive) as tar:

        def read(digest: str) -> dict[str, Any]:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None, f"{archive}: no blob {digest}"
            return dict(json.load(member))

        manifest = read(load("bundle").digest_of(archive))
        diff_ids = read(manifest["config"]["digest"])["rootfs"]["diff_ids"]
    chain = [diff_ids[0]]
    for diff_id in diff_ids[1:]:
        chain.append("sha256:" + hashlib.sha256(f"{chain[-1]} {diff_id}".encode()).hexdigest())
    layers = [layer["digest"] for layer in manifest["layers"]]
    return manifest["config"]["digest"], dict(zip(layers, chain, strict=True))
