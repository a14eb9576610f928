"""Images for the real node (``RUNTIME=containerd``), without a registry: a pause image of one static
binary made here, and the OCI archives of ``make image`` (``dist/``) imported into containerd."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from localkube.state import ROOT

PAUSE_IMAGE = "localhost/localkube-pause:1"
PAUSE_ARCHIVE = ROOT / ".cache" / "node" / "pause.oci.tar"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: one static binary
# The archives imported into containerd: dist/ of `make image`, or another folder of *.oci.tar.
DIST = Path(os.environ.get("LOCALKUBE_IMAGES_DIR", ROOT / "dist"))
CTR = "ctr"


def _blob(out: tarfile.TarFile, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _index(out: tarfile.TarFile, manifest: dict[str, object], name: str) -> None:
    """The manifest blob, and the layout's ``oci-layout`` and ``index.json`` naming it ``name``
    (``repository:tag``), as ``ctr images import`` reads them."""
    manifest_desc = _blob(out, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
    }
    for entry, doc in (("oci-layout", {"imageLayoutVersion": "1.0.0"}),
                       ("index.json", {"schemaVersion": 2, "manifests": [manifest_desc]})):  # fmt: skip
        data = json.dumps(doc).encode()
        info = tarfile.TarInfo(entry)
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))


def _layer(binary: Path) -> tuple[bytes, str]:
    """A gzipped layer holding ``binary`` as /busybox (root-owned, mode 0755), and its diff ID."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as layer:
        info = tarfile.TarInfo("busybox")
        data = binary.read_bytes()
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        layer.addfile(info, io.BytesIO(data))
    tar = raw.getvalue()
    return gzip.compress(tar, mtime=0), f"sha256:{hashlib.sha256(tar).hexdigest()}"


def pause_archive(path: Path = PAUSE_ARCHIVE, binary: Path = BUSYBOX) -> Path:
    """Write (once) the OCI archive of the pod sandbox image: busybox's ``sleep``, as UID 65535,
    that holds a pod's namespaces as upstream's pause does. Needs the ``busybox-static`` package."""
    if path.exists():
        return path
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: install Debian's busybox-static (the pause image's binary)")
    layer, diff_id = _layer(binary)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/busybox", "sleep", "2147483647"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as out:
        layer_desc = _blob(out, layer, "application/vnd.oci.image.layer.v1.tar+gzip")
        config_desc = _blob(out, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "config": config_desc, "layers": [layer_desc],
                    "mediaType": "application/vnd.oci.image.manifest.v1+json"}  # fmt: skip
        _index(out, manifest, PAUSE_IMAGE)
    tmp.replace(path)
    return path


def as_root(archive: Path, name: str, out: Path) -> Path:
    """An OCI archive of the image in ``archive`` whose config names no USER (so it runs as root,
    as stock images such as vLLM's do), called ``name`` (``repository:tag``): its layers are
    ``archive``'s own, its config, manifest and index new. Written to ``out`` unless it is newer than
    ``archive``."""
    if out.exists() and out.stat().st_mtime >= archive.stat().st_mtime:
        return out
    with tarfile.open(archive) as src:

        def read(member: str) -> bytes:
            got = src.extractfile(member)
            assert got is not None, member
            return got.read()

        index = json.loads(read("index.json"))
        manifest = json.loads(read(f"blobs/sha256/{index['manifests'][0]['digest'].split(':')[1]}"))
        config = json.loads(read(f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"))
        config.setdefault("config", {}).pop("User", None)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        with tarfile.open(tmp, "w") as dst:
            for member in src.getmembers():
                if member.name.startswith("blobs/") and member.isfile():
                    dst.addfile(member, src.extractfile(member))
            media = "application/vnd.oci.image.config.v1+json"
            manifest["config"] = _blob(dst, json.dumps(config).encode(), media)
            _index(dst, manifest, name)
    tmp.replace(out)
    return out


def dist_archives(dist: Path = DIST) -> list[Path]:
    """The image archives ``make image`` wrote (``dist/*.oci.tar``); an error naming the fix if none."""
    archives = sorted(dist.glob("*.oci.tar"))
    if not archives:
        raise FileNotFoundError(f"no image archive (*.oci.tar) in {dist}: run `make image` first")
    return archives


def import_images(socket: Path, archives: list[Path]) -> list[str]:
    """Import ``archives`` into containerd's CRI namespace (``k8s.io``), unpacked for the overlayfs
    snapshotter, so pods use them with ``imagePullPolicy: IfNotPresent`` or ``Never``. Returns the
    names containerd gave them."""
    if shutil.which(CTR) is None:
        raise FileNotFoundError("ctr is missing: install Debian's containerd")
    names: list[str] = []
    for archive in archives:
        done = subprocess.run(
            [CTR, f"--address={socket}", "--namespace=k8s.io", "images", "import", "--snapshotter=overlayfs",
             str(archive)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import {archive} failed ({done.returncode}): {done.stderr.strip()}")
        names += [line.split()[1] for line in done.stdout.splitlines() if line.startswith("unpacking ")]
    return names


def evict_image(socket: Path, digest: str) -> list[str]:
    """Remove every name containerd's CRI namespace gives the image whose manifest is ``digest``, and
    wait for its garbage collection: the node no longer has the image, and its next pull fetches
    it whole. Returns the names removed (``import_images`` of its archive brings it back)."""
    done = subprocess.run([CTR, f"--address={socket}", "--namespace=k8s.io", "images", "ls"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ctr images ls failed ({done.returncode}): {done.stderr.strip()}")
    names = [f[0] for f in (line.split() for line in done.stdout.splitlines()[1:]) if len(f) > 2 and f[2] == digest]
    if names:
        done = subprocess.run([CTR, f"--address={socket}", "--namespace=k8s.io", "images", "rm", "--sync", *names],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"ctr images rm {' '.join(names)} failed ({done.returncode}): {done.stderr.strip()}")
    return names


def unpacked_layers(socket: Path) -> set[str]:
    """The chain IDs of the layers unpacked on the node (containerd's committed overlayfs snapshots):
    an image pull fetches only the layers not among them."""
    done = subprocess.run([CTR, f"--address={socket}", "--namespace=k8s.io", "snapshots", "--snapshotter=overlayfs",
                           "ls"], capture_output=True, text=True, timeout=60)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ctr snapshots ls failed ({done.returncode}): {done.stderr.strip()}")
    return {f[0] for f in (line.split() for line in done.stdout.splitlines()[1:]) if f and f[-1] == "Committed"}
