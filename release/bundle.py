"""make release VERSION=X.Y.Z [REGISTRY=...]: everything a team needs to pin Slipway X.Y.Z, in dist/X.Y.Z/.

    slipway-operator-X.Y.Z.oci.tar    the operator image (make image), an OCI archive
    slipway-workloads-X.Y.Z.oci.tar   the workloads image
    install.yaml                      CRDs, RBAC and the operator, images by digest (kubectl apply --server-side)
    slipway-X.Y.Z.tgz                 the Helm chart (its CRDs only with crds.install=true), images by digest
    slipway-crds-X.Y.Z.tgz            the CRDs as a chart of their own (helm upgrade upgrades them)
    slipway_operator-X.Y.Z-py3-none-any.whl  the Python package and kubectl plugin (pip, pipx)
    kubectl-slipway.pyz, kubectl-slipway.tar.gz, plugin.yaml  the kubectl plugin as one file, and for krew
                                      (release/plugin.py)
    images.txt                        each image's name, digest and archive
    slipway-{operator,workloads}-X.Y.Z.sbom.cdx.json  each image's SBOM (CycloneDX, syft): Debian and Python packages
    slipway-base-X.Y.Z.packages.txt   the Debian base both images share: when it was built, from what, dpkg -l
    SHA256SUMS                        sha256sum -c SHA256SUMS
    SHA256SUMS.sig, *.oci.tar.sig     SSHSIG signatures by the release key (release/supply.py says how to verify)

A release is built from a commit (a working tree with changes is refused without --allow-dirty) and
signed (--signing-key, an OpenSSH private key; --unsigned for a development build).

No registry and no Docker: the images are built by images/build.sh (buildah) and their digests read
from the archives. A VERSION other than the tree's (release/versioning.py) is stamped into a copy of
the sources under build/release/, never into the tree. REGISTRY (default ghcr.io/slipway-dev) is the
prefix the manifests and chart name; a digest does not depend on it, so an archive pushed with
`skopeo copy --preserve-digests` is the image install.yaml names, under any prefix.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plugin  # noqa: E402
import supply  # noqa: E402
import versioning  # noqa: E402

ROOT = versioning.ROOT
DEFAULT_REGISTRY = "ghcr.io/slipway-dev"
KINDS = ("operator", "workloads")
HELM = ROOT / ".cache" / "helm" / "helm"
SOURCES = [
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "constraints.txt",
    "operator/slipway",
    "images",
    "charts",
    "manifests",
    "crds",
]


def digest_of(archive: Path) -> str:
    """The manifest digest of the one image in an OCI archive (its index.json), what a registry serves."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json: not an OCI archive")
        manifests = json.load(member)["manifests"]
    if len(manifests) != 1:
        raise ValueError(f"{archive}: {len(manifests)} images in index.json, expected one")
    digest = manifests[0]["digest"]
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"{archive}: index.json names {digest!r}, not a sha256 digest")
    return str(digest)


def tagged(kind: str, version: str) -> str:
    return f"{DEFAULT_REGISTRY}/slipway-{kind}:{version}"


def pinned(kind: str, registry: str, digest: str) -> str:
    return f"{registry}/slipway-{kind}@{digest}"


def resources(kustomization: Path) -> list[Path]:
    """The files a kustomization lists, in its order (a folder: its own kustomization's files)."""
    import yaml

    out: list[Path] = []
    for entry in yaml.safe_load(kustomization.read_text())["resources"]:
        path = (kustomization.parent / entry).resolve()
        out += resources(path / "kustomization.yaml") if path.is_dir() else [path]
    return out


def install_yaml(src: Path, version: str, registry: str, digests: dict[str, str]) -> str:
    """manifests/ as one file (what `kubectl apply -k manifests/` installs), both images by digest."""
    docs = []
    for path in resources(src / "manifests" / "kustomization.yaml"):
        text = path.read_text()
        for kind in KINDS:
            text = text.replace(tagged(kind, version), pinned(kind, registry, digests[kind]))
        docs.append(f"# Source: {path.relative_to(src)}\n{text.strip()}\n")
    text = "---\n".join(docs)
    left = re.findall(r"ghcr\.io/slipway-dev/slipway[\w-]*:[\w.]+", text)
    if left:
        raise ValueError(f"install.yaml: images still named by tag: {sorted(set(left))}; manifests/ should name "
                         f"ghcr.io/slipway-dev/slipway-operator:{version} and -workloads:{version}")  # fmt: skip
    header = (
        f"# Slipway {version}: CRDs, RBAC and the operator in the namespace slipway-system, both images by digest.\n"
        "# kubectl apply --server-side -f install.yaml (another namespace: replace slipway-system throughout;\n"
        "# set SLIPWAY_MLFLOW_URL and SLIPWAY_PROMETHEUS_URL to your MLflow and Prometheus).\n"
    )
    return header + text


def chart_values(values: str, registry: str, digests: dict[str, str]) -> str:
    """The chart's values.yaml with each image's repository under `registry` and pinned to its digest."""
    for kind in KINDS:
        pattern = rf"(repository: )ghcr\.io/slipway-dev/(slipway-{kind})\n((?:  .*\n)*?  digest: )\"\"\n"
        values, count = re.subn(pattern, rf'\g<1>{registry}/\g<2>\n\g<3>"{digests[kind]}"\n', values)
        if count != 1:
            raise ValueError(f"charts/slipway/values.yaml: no block `repository: ghcr.io/slipway-dev/slipway-{kind}`"
                             " followed by `digest: \"\"`")  # fmt: skip
    return values


def helm(*args: str) -> None:
    if not HELM.exists():
        raise SystemExit(f"{HELM} is missing: run `make helm`")
    home = HELM.parent / "home"
    env = {**os.environ, **{f"HELM_{d.upper()}_HOME": str(home / d) for d in ("cache", "config", "data")}}
    subprocess.run([str(HELM), *args], env=env, check=True, stdout=subprocess.DEVNULL)


def stage(version: str) -> Path:
    """The sources to build: the tree when it carries `version`, else a copy stamped with it."""
    if versioning.stamped(ROOT) == version:
        return ROOT
    src = ROOT / "build" / "release" / f"src-{version}"
    shutil.rmtree(src, ignore_errors=True)
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    (src / ".cache").symlink_to(ROOT / ".cache")  # buildah's storage, the base and the wheels: shared
    versioning.stamp(version, src)
    print(f"release: {version} stamped into a copy of the sources, {src.relative_to(ROOT)}")
    return src


def link(source: Path, target: Path) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def sha256sums(out: Path) -> str:
    lines = []
    for path in sorted(p for p in out.iterdir() if p.name != "SHA256SUMS"):
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        lines.append(f"{h.hexdigest()}  {path.name}\n")
    return "".join(lines)


def release(version: str, registry: str, skip_images: bool = False, signing_key: Path | None = None,
            allow_dirty: bool = False) -> Path:  # fmt: skip
    """dist/VERSION/; unsigned when ``signing_key`` is None (main() requires --unsigned for that)."""
    versioning.parse(version)
    supply.require_clean(ROOT, allow_dirty)
    supply.require_syft()
    start = time.monotonic()
    src = stage(version)
    if not skip_images:
        python = os.environ.get("PYTHON", str(ROOT / ".venv" / "bin" / "python"))
        subprocess.run(["bash", "images/build.sh"], cwd=src, env={**os.environ, "PYTHON": python}, check=True)
    built = time.monotonic() - start
    out = ROOT / "dist" / version
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    digests = {}
    for kind in KINDS:
        archive = src / "dist" / f"slipway-{kind}-{version}.oci.tar"
        link(archive, out / archive.name)
        digests[kind] = digest_of(out / archive.name)
        supply.sbom(out / archive.name, out / f"slipway-{kind}-{version}.sbom.cdx.json")
    packages = src / "dist" / f"slipway-base-{version}.packages.txt"
    if not packages.exists():
        raise SystemExit(f"release: {packages} is missing: make image writes it (the base's package list)")
    link(packages, out / packages.name)
    for wheel in (src / "build" / "image" / "operator" / "slipway").glob(f"slipway_operator-{version}-*.whl"):
        link(wheel, out / wheel.name)
    (out / "install.yaml").write_text(install_yaml(src, version, registry, digests))
    plugin.build(src, version, out)
    chart = ROOT / "build" / "release" / "chart" / "slipway"
    shutil.rmtree(chart.parent, ignore_errors=True)
    shutil.copytree(src / "charts" / "slipway", chart)
    (chart / "values.yaml").write_text(chart_values((chart / "values.yaml").read_text(), registry, digests))
    helm("package", str(chart), "--version", version, "--app-version", version, "-d", str(out))
    if (src / "charts" / "slipway-crds").is_dir():  # the CRDs as a chart of their own, upgraded first
        helm("package", str(src / "charts" / "slipway-crds"), "--version", version, "--app-version", version,
             "-d", str(out))  # fmt: skip
    (out / "images.txt").write_text("".join(
        f"slipway-{k} {pinned(k, registry, digests[k])} slipway-{k}-{version}.oci.tar\n" for k in KINDS))  # fmt: skip
    (out / "SHA256SUMS").write_text(sha256sums(out))
    if signing_key is not None:
        for path in [out / "SHA256SUMS", *sorted(out.glob("*.oci.tar"))]:
            supply.sign(signing_key, path)
        print(f"release: signed by {supply.fingerprint(signing_key)}: SHA256SUMS.sig and each archive's .sig")
    print(f"release: {out.relative_to(ROOT)} in {time.monotonic() - start:.0f}s (images {built:.0f}s)")
    for path in sorted(out.iterdir()):
        print(f"  {path.name}  {path.stat().st_size / 1e6:.1f} MB")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", nargs="?", default=versioning.stamped(), help="X.Y.Z (default: the tree's)")
    parser.add_argument("--registry", default=DEFAULT_REGISTRY, help="the images' prefix in install.yaml and chart")
    parser.add_argument("--skip-images", action="store_true", help="reuse the archives already in dist/")
    parser.add_argument("--signing-key", type=Path, help="the release key: an OpenSSH private key (ssh-keygen)")
    parser.add_argument("--unsigned", action="store_true", help="no signatures: a development build")
    parser.add_argument("--allow-dirty", action="store_true", help="build from uncommitted changes: development")
    args = parser.parse_args()
    supply.require_key(args.signing_key, args.unsigned)
    release(args.version, args.registry.rstrip("/"), args.skip_images, args.signing_key, args.allow_dirty)


if __name__ == "__main__":
    main()
