"""``python -m localkube.provisioner``: dynamic PersistentVolumes for StorageClass ``local``.

For each pending claim of a StorageClass whose provisioner is
``slipway.dev/local`` it creates a ``hostPath`` PV on a directory under the
cluster's ``volumes/`` and pre-binds it (``claimRef``); the real PV controller
completes the binding. When a PV it made is ``Released`` and its reclaim policy
is ``Delete``, it removes the directory and the PV. The directory outlives the
pods that use the claim, so checkpoints survive a pod.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from localkube.bootstrap import PROVISIONER_NAME
from localkube.kube import Kube

log = logging.getLogger("localkube.provisioner")

JSON = dict[str, Any]
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


class Provisioner:
    """Provision and reclaim ``hostPath`` volumes under ``volumes_dir``."""

    def __init__(self, kube: Kube, volumes_dir: Path) -> None:
        self.kube = kube
        self.volumes_dir = volumes_dir.resolve()
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def _class(self, name: str | None) -> JSON | None:
        if not name:
            return None
        return self.kube.get_or_none(f"/apis/storage.k8s.io/v1/storageclasses/{name}")

    def on_claim(self, kind: str, pvc: JSON) -> None:
        if kind == "DELETED":
            return
        spec, meta = pvc["spec"], pvc["metadata"]
        if spec.get("volumeName") or pvc.get("status", {}).get("phase") != "Pending" or meta.get("deletionTimestamp"):
            return
        sc = self._class(spec.get("storageClassName"))
        if not sc or sc.get("provisioner") != PROVISIONER_NAME:
            return
        name = f"pvc-{meta['uid']}"
        path = self.volumes_dir / f"pv-{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER_NAME}},
            "spec": {
                "capacity": {"storage": spec.get("resources", {}).get("requests", {}).get("storage", "1Gi")},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        with self.lock:
            path.mkdir(parents=True, exist_ok=True)
            # Writable by any UID, as Rancher's local-path-provisioner makes its hostPath volumes:
            # a hostPath volume gets no fsGroup ownership from a kubelet, and the real node's
            # containers run as 65532 (the process runtime's pods run as this user).
            path.chmod(0o777)
            try:
                self.kube.create("/api/v1/persistentvolumes", pv)
                log.info("provisioned %s for %s/%s at %s", name, meta["namespace"], meta["name"], path)
            except ApiException as e:
                if e.status != 409:
                    log.warning("could not create %s: %s %s", name, e.status, e.body)

    def on_volume(self, kind: str, pv: JSON) -> None:
        meta, spec = pv["metadata"], pv["spec"]
        if meta.get("annotations", {}).get(PROVISIONED_BY) != PROVISIONER_NAME:
            return
        released = pv.get("status", {}).get("phase") in ("Released", "Failed")
        if kind == "DELETED" or not released or spec.get("persistentVolumeReclaimPolicy") != "Delete":
            return
        path = Path(spec.get("hostPath", {}).get("path", ""))
        with self.lock:
            if path.is_relative_to(self.volumes_dir) and path != self.volumes_dir:
                shutil.rmtree(path, ignore_errors=True)
            try:
                if self.kube.delete(f"/api/v1/persistentvolumes/{meta['name']}") is not None:
                    log.info("deleted %s and %s", meta["name"], path)
            except ApiException as e:
                log.warning("could not delete %s: %s", meta["name"], e.status)

    def on_claims(self, items: list[JSON]) -> None:
        for item in items:
            self.on_claim("ADDED", item)

    def on_volumes(self, items: list[JSON]) -> None:
        for item in items:
            self.on_volume("ADDED", item)

    def run(self) -> None:
        threads = [
            threading.Thread(
                target=self.kube.watch,
                args=(
                    "/api/v1/persistentvolumeclaims",
                    self.on_claims,
                    self.on_claim,
                    self.stopping.is_set,
                ),
                name="claims",
                daemon=True,
            ),
            threading.Thread(
                target=self.kube.watch,
                args=(
                    "/api/v1/persistentvolumes",
                    self.on_volumes,
                    self.on_volume,
                    self.stopping.is_set,
                ),
                name="volumes",
                daemon=True,
            ),
        ]
        for t in threads:
            t.start()
        self.stopping.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localkube.provisioner", description=__doc__)
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--volumes-dir", type=Path, required=True)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    a.volumes_dir.mkdir(parents=True, exist_ok=True)
    prov = Provisioner(Kube(a.kubeconfig), a.volumes_dir)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: prov.stopping.set())
    prov.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
