"""Pod volumes as host directories, later bind-mounted onto each ``mountPath``.

- ``emptyDir``: ``<pod dir>/volumes/<name>``, removed with the pod;
- ``configMap``, ``secret``, ``downwardAPI`` and ``projected``: files written
  there (``items``, ``defaultMode``, ``optional`` honoured; not updated later);
- projected ``serviceAccountToken``: a TokenRequest for the pod's service
  account, bound to the pod, refreshed at 80% of its lifetime;
- ``persistentVolumeClaim``: the directory of the bound PV (``hostPath`` or
  ``local``), which outlives the pod;
- ``hostPath``: the host path itself.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localkube.kube import Kube
from localkube.nodeagent.envvars import ConfigError, field_value, resource_value

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class VolumeError(ConfigError):
    """A volume cannot be set up yet."""

    reason = "ContainerCreating"


@dataclass
class _Token:
    path: Path
    namespace: str
    service_account: str
    audience: str | None
    expiration_seconds: int
    mode: int
    refresh_at: float = 0.0


@dataclass
class PodVolumes:
    """The host side of a pod's volumes."""

    paths: dict[str, Path] = field(default_factory=dict)
    tokens: list[_Token] = field(default_factory=list)

    def next_refresh(self) -> float | None:
        return min((t.refresh_at for t in self.tokens), default=None)


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)


class VolumeBuilder:
    """Materializes the volumes of one pod under ``<pod dir>/volumes``."""

    def __init__(self, kube: Kube, pod: JSON, pod_dir: Path, node_allocatable: JSON) -> None:
        self.kube = kube
        self.pod = pod
        self.ns = pod["metadata"]["namespace"]
        self.root = pod_dir / "volumes"
        self.node_allocatable = node_allocatable

    def get(self, kind: str, name: str) -> JSON | None:
        return self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/{kind}/{name}")

    def build(self) -> PodVolumes:
        out = PodVolumes()
        for vol in self.pod["spec"].get("volumes", []):
            name = vol["name"]
            target = self.root / name
            if "emptyDir" in vol:
                target.mkdir(parents=True, exist_ok=True)
            elif "configMap" in vol:
                self._keys(target, "configmaps", vol["configMap"], secret=False)
            elif "secret" in vol:
                src = dict(vol["secret"], name=vol["secret"].get("secretName", ""))
                self._keys(target, "secrets", src, secret=True)
            elif "downwardAPI" in vol:
                self._downward(target, vol["downwardAPI"], vol["downwardAPI"].get("defaultMode", 0o644))
            elif "projected" in vol:
                self._projected(target, vol["projected"], out)
            elif "persistentVolumeClaim" in vol:
                target = self._claim(vol["persistentVolumeClaim"]["claimName"])
            elif "hostPath" in vol:
                target = self._host_path(vol["hostPath"])
            else:
                kind = next((k for k in vol if k != "name"), "?")
                raise VolumeError(f"volume {name!r}: type {kind} is not supported by localkube")
            out.paths[name] = target
        return out

    # -- sources ---------------------------------------------------------------
    def _keys(self, target: Path, kind: str, src: JSON, secret: bool, mode: int | None = None) -> None:
        mode = src.get("defaultMode", mode if mode is not None else 0o644)
        obj = self.get(kind, src["name"])
        if obj is None:
            if src.get("optional"):
                target.mkdir(parents=True, exist_ok=True)
                return
            raise VolumeError(f'{kind[:-1]} "{src["name"]}" not found')
        data: dict[str, bytes] = {}
        if secret:
            data = {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
        else:
            data = {k: v.encode() for k, v in obj.get("data", {}).items()}
            data.update({k: base64.b64decode(v) for k, v in obj.get("binaryData", {}).items()})
        items = src.get("items")
        if items:
            for item in items:
                if item["key"] not in data:
                    if src.get("optional"):
                        continue
                    raise VolumeError(f"key {item['key']} not found in {kind[:-1]} {self.ns}/{src['name']}")
                _write(target / item["path"], data[item["key"]], item.get("mode", mode))
        else:
            for key, value in data.items():
                _write(target / key, value, mode)
        target.mkdir(parents=True, exist_ok=True)

    def _downward(self, target: Path, src: JSON, mode: int) -> None:
        container = self.pod["spec"]["containers"][0]
        for item in src.get("items", []):
            if "fieldRef" in item:
                value = field_value(self.pod, item["fieldRef"]["fieldPath"])
            else:
                value = resource_value(container, item["resourceFieldRef"], self.node_allocatable)
            _write(target / item["path"], value.encode(), item.get("mode", mode))
        target.mkdir(parents=True, exist_ok=True)

    def _projected(self, target: Path, src: JSON, out: PodVolumes) -> None:
        mode = src.get("defaultMode", 0o644)
        for source in src.get("sources", []):
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                token = _Token(
                    path=target / sat["path"],
                    namespace=self.ns,
                    service_account=self.pod["spec"].get("serviceAccountName", "default"),
                    audience=sat.get("audience"),
                    expiration_seconds=int(sat.get("expirationSeconds", 3600)),
                    mode=mode,
                )
                self.refresh_token(token)
                out.tokens.append(token)
            elif "configMap" in source:
                self._keys(target, "configmaps", source["configMap"], secret=False, mode=mode)
            elif "secret" in source:
                self._keys(target, "secrets", source["secret"], secret=True, mode=mode)
            elif "downwardAPI" in source:
                self._downward(target, source["downwardAPI"], mode)
            else:
                raise VolumeError(f"projected source {sorted(source)} is not supported by localkube")
        target.mkdir(parents=True, exist_ok=True)

    def refresh_token(self, token: _Token) -> None:
        """Request a token bound to the pod (TokenRequest API) and write it."""
        meta = self.pod["metadata"]
        spec: JSON = {
            "expirationSeconds": token.expiration_seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if token.audience:
            spec["audiences"] = [token.audience]
        resp = self.kube.create(
            f"/api/v1/namespaces/{token.namespace}/serviceaccounts/{token.service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        _write(token.path, resp["status"]["token"].encode(), token.mode)
        expires = datetime.datetime.fromisoformat(resp["status"]["expirationTimestamp"].replace("Z", "+00:00"))
        lifetime = (expires - datetime.datetime.now(datetime.UTC)).total_seconds()
        token.refresh_at = time.monotonic() + 0.8 * max(lifetime, 10)

    def _claim(self, claim: str) -> Path:
        pvc = self.get("persistentvolumeclaims", claim)
        if pvc is None:
            raise VolumeError(f'persistentvolumeclaim "{claim}" not found')
        volume = pvc.get("spec", {}).get("volumeName")
        if not volume or pvc.get("status", {}).get("phase") != "Bound":
            raise VolumeError(f'persistentvolumeclaim "{claim}" is not bound')
        pv = self.kube.get_or_none(f"/api/v1/persistentvolumes/{volume}")
        if pv is None:
            raise VolumeError(f'persistentvolume "{volume}" not found')
        source = pv["spec"].get("hostPath") or pv["spec"].get("local")
        if not source:
            raise VolumeError(f"persistentvolume {volume} is neither hostPath nor local")
        path = Path(source["path"])
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _host_path(self, src: JSON) -> Path:
        path = Path(src["path"])
        kind = src.get("type", "")
        if kind == "DirectoryOrCreate":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        elif kind in ("Directory", "File") and not path.exists():
            raise VolumeError(f"hostPath {path} does not exist")
        return path


def remove_pod_volumes(pod_dir: Path) -> None:
    """Delete the pod's own volume directories (never PV or hostPath data)."""
    root = pod_dir / "volumes"
    if root.exists():
        shutil.rmtree(root, ignore_errors=True)


def mounts(container: JSON, volumes: PodVolumes) -> list[JSON]:
    """Bind mounts (source, target, readOnly) for the container's ``volumeMounts``."""
    out = []
    for vm in container.get("volumeMounts", []):
        source = volumes.paths.get(vm["name"])
        if source is None:
            raise VolumeError(f"volumeMount {vm['name']!r} has no volume")
        if vm.get("subPath"):
            source = source / vm["subPath"]
            if not source.exists():
                source.mkdir(parents=True, exist_ok=True)
        out.append({"source": str(source), "target": vm["mountPath"], "readOnly": bool(vm.get("readOnly"))})
    return out


def ensure_owner_only(path: Path) -> None:
    os.chmod(path, 0o700)
