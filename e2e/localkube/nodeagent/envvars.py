"""A container's environment and command line, as the kubelet builds them.

Order (later wins): the cluster variables (``KUBERNETES_SERVICE_HOST``/``PORT``
pointing at the real API server on 127.0.0.1), ``envFrom``, then ``env``.
``env`` values and ``command``/``args`` expand ``$(VAR)``; ``$$`` escapes.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from localkube.nodeagent import images

JSON = dict[str, Any]


class ConfigError(Exception):
    """The container cannot be configured yet (a missing ConfigMap, Secret or key)."""

    reason = "CreateContainerConfigError"


_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
}  # fmt: skip


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", "1e3") as a Decimal."""
    s = str(text).strip()
    match = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", s)
    if not match or (match.group(2) and match.group(2) not in _SUFFIXES):
        raise ValueError(f"invalid quantity {text!r}")
    return Decimal(match.group(1)) * _SUFFIXES.get(match.group(2), Decimal(1))


def expand(text: str, env: dict[str, str]) -> str:
    """Expand ``$(VAR)`` from ``env``; unknown references stay as written, ``$$`` is a literal ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, text)


def field_value(pod: JSON, path: str) -> str:
    """The value of a downward-API ``fieldRef.fieldPath``."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", [])),
        "status.podIP": status.get("podIP", ""),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", [])),
    }
    if path in simple:
        return str(simple[path])
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1], {})
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise ConfigError(f"unsupported fieldPath {path!r}")


def resource_value(container: JSON, ref: JSON, node_allocatable: JSON) -> str:
    """The value of a ``resourceFieldRef`` (limits fall back to the node's allocatable)."""
    resource = ref["resource"]
    kind, _, name = resource.partition(".")
    resources = container.get("resources", {})
    raw = resources.get(kind, {}).get(name)
    if raw is None and kind == "limits":
        raw = node_allocatable.get(name)
    if raw is None and kind == "requests":
        raw = "0"
    divisor = parse_quantity(ref.get("divisor", "1"))
    if divisor == 0:
        raise ConfigError(f"divisor of {resource} is zero")
    return str(math.ceil(parse_quantity(raw or "0") / divisor))


Getter = Callable[[str, str], JSON | None]


def _source_data(obj: JSON | None, secret: bool) -> dict[str, str]:
    if obj is None:
        return {}
    if secret:
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in obj.get("data", {}).items()}
    data = dict(obj.get("data", {}))
    data.update({k: base64.b64decode(v).decode(errors="replace") for k, v in obj.get("binaryData", {}).items()})
    return data


def build_env(
    pod: JSON,
    container: JSON,
    base: dict[str, str],
    get_configmap: Getter,
    get_secret: Getter,
    node_allocatable: JSON,
) -> dict[str, str]:
    """The container's environment; raises :class:`ConfigError` for missing non-optional sources."""
    ns = pod["metadata"]["namespace"]
    env = dict(base)
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        for key, secret in (("configMapRef", False), ("secretRef", True)):
            ref = source.get(key)
            if not ref:
                continue
            obj = (get_secret if secret else get_configmap)(ns, ref["name"])
            if obj is None and not ref.get("optional"):
                raise ConfigError(f'{"secret" if secret else "configmap"} "{ref["name"]}" not found')
            for k, v in _source_data(obj, secret).items():
                env[prefix + k] = v
    for var in container.get("env", []):
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        vf = var["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_value(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            env[name] = resource_value(container, vf["resourceFieldRef"], node_allocatable)
        else:
            secret = "secretKeyRef" in vf
            ref = vf["secretKeyRef" if secret else "configMapKeyRef"]
            what = "secret" if secret else "configmap"
            obj = (get_secret if secret else get_configmap)(ns, ref["name"])
            data = _source_data(obj, secret)
            if ref["key"] in data:
                env[name] = data[ref["key"]]
            elif not ref.get("optional"):
                if obj is None:
                    raise ConfigError(f'{what} "{ref["name"]}" not found')
                raise ConfigError(f"couldn't find key {ref['key']} in {what} {ns}/{ref['name']}")
    return env


def command_line(container: JSON, env: dict[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded. Without ``command``, the image's entrypoint
    if it is one the node agent knows (:mod:`localkube.nodeagent.images`), else none: no image
    exists here. Empty if there is nothing to run."""
    command = container.get("command") or images.entrypoint(container.get("image", ""))
    if not command:
        return []
    return [expand(a, env) for a in command + container.get("args", [])]
