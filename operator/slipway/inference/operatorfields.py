"""What the operator's own settings put in a serving pod (the fetch-model image, the MLflow address,
the Secret of MLflow credentials its containers read, the TLS files they mount) is no part of a
revision: an existing Deployment keeps what it has until its next revision, and a revision hashed
by an operator that counted its MLflow address in is still recognised (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from slipway.inference.build import REVISION_LABEL
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.revision import legacy_revisions, revision
from slipway.inference.rollout.base import Desired
from slipway.mlflow.digests import FILES_DIGEST_ENV, is_digest
from slipway.podspec import MLFLOW_TLS_ENV, MLFLOW_TLS_VOLUMES, pod_tls_of, tls_pieces


def keeping_operator_fields(desired: dict[str, Any], existing: Mapping[str, Any] | None) -> dict[str, Any]:
    """``desired`` with what the operator's settings put in the pod template (the fetch image, the
    MLflow address, the credentials Secret, the TLS variables and files of each container) taken from
    ``existing`` when that Deployment already serves the same revision: a new operator image, fetch
    image, MLflow address, credentials rule (an upgrade to Namespace-named credentials) or TLS setting
    restarts no pod and reaches them with the next revision, or `kubectl rollout restart`."""
    if existing is None:
        return desired
    labels = ((existing.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    if labels.get(REVISION_LABEL) != desired["metadata"]["labels"].get(REVISION_LABEL):
        return desired
    had = ((existing.get("spec") or {}).get("template") or {}).get("spec") or {}
    pod = desired["spec"]["template"]["spec"]
    for key in ("containers", "initContainers"):
        before = {c.get("name"): c for c in had.get(key) or [] if isinstance(c, Mapping)}
        for container in pod.get(key) or []:
            old = before.get(container["name"])
            if old is None:
                continue
            if container["name"] == "fetch-model" and old.get("image"):
                container["image"] = old["image"]
            for name in ("MLFLOW_TRACKING_URI", *MLFLOW_TLS_ENV):
                _keep_env(container, old, name)
            # The MLflow credentials Secret a container reads (the operator's setting, or the one the
            # Namespace names): envFrom holds nothing else the revision does not already fix.
            if old.get("envFrom"):
                container["envFrom"] = [dict(e) for e in old["envFrom"] if isinstance(e, Mapping)]
            else:
                container.pop("envFrom", None)
    _keep_tls_files(pod, had)
    return desired


def _keep_tls_files(pod: dict[str, Any], had: Mapping[str, Any]) -> None:
    """The TLS volumes of ``pod`` and their mounts as the pod spec ``had`` them (rebuilt from the
    ConfigMap and Secret it names: the API server's defaults are no part of what Slipway applied)."""
    volumes, mounts, _ = tls_pieces(pod_tls_of(had))
    mounted = {
        c.get("name")
        for key in ("containers", "initContainers")
        for c in had.get(key) or []
        if any(m.get("name") in MLFLOW_TLS_VOLUMES for m in c.get("volumeMounts") or [])
    }
    _replace_tls(pod, "volumes", volumes)
    for container in [*(pod.get("initContainers") or []), *pod["containers"]]:
        _replace_tls(container, "volumeMounts", mounts if container["name"] in mounted else [])


def _replace_tls(into: dict[str, Any], key: str, entries: list[dict[str, Any]]) -> None:
    """The list ``key`` of ``into`` with its MLflow TLS entries (by name) replaced by ``entries``, at its end."""
    others = [e for e in into.get(key) or [] if e.get("name") not in MLFLOW_TLS_VOLUMES]
    if others or entries:
        into[key] = others + entries
    else:
        into.pop(key, None)


def _keep_env(container: dict[str, Any], old: Mapping[str, Any], name: str) -> None:
    """The variable ``name`` of ``container`` as ``old`` had it (in place; gone if it had none)."""
    kept = next((e for e in old.get("env") or [] if isinstance(e, Mapping) and e.get("name") == name), None)
    env = container.get("env") or []
    at = next((i for i, e in enumerate(env) if e.get("name") == name), None)
    if at is not None and kept is not None:
        env[at] = {k: v for k, v in kept.items() if k in ("name", "value", "valueFrom")}
    elif at is not None:
        del env[at]
    elif kept is not None and kept.get("value") is not None:
        env.append({"name": name, "value": kept["value"]})


def revision_for(
    spec: InferenceDeploymentSpec,
    found: Desired,
    mlflow_url: str | None,
    deployments: Iterable[Mapping[str, Any] | None],
    status: Mapping[str, Any],
) -> str:
    """The revision ``found`` is served as: its hash (:func:`revision`), unless a track Deployment or
    the status (stable, canary, lastRollback, previousStable) records the same revision under the
    hash of operators that counted their MLflow address in (:func:`legacy_revisions`): then that
    one, so that an upgrade starts no canary and forgets no rollback."""
    current = revision(spec, found.version, found.uri, found.model)
    recorded: set[str] = set()
    urls: set[str | None] = {mlflow_url, None}
    for body in deployments:
        template = ((body or {}).get("spec") or {}).get("template") or {}
        recorded.add(str((template.get("metadata") or {}).get("labels", {}).get(REVISION_LABEL) or ""))
        pod = template.get("spec") or {}
        for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
            for env in container.get("env") or []:
                if env.get("name") == "MLFLOW_TRACKING_URI" and env.get("value"):
                    urls.add(str(env["value"]))
    for key in ("stable", "canary", "lastRollback", "previousStable"):
        record = status.get(key)
        if isinstance(record, Mapping) and record.get("revision"):
            recorded.add(str(record["revision"]))
    if current in recorded:
        return current
    legacy = legacy_revisions(spec, found.version, found.uri, found.model, urls) & recorded
    return min(legacy) if legacy else current


def files_digest(desired: Desired, resolved: Mapping[str, str], deployments: Iterable[Mapping[str, Any] | None]) -> str:
    """What fetch-model checks ``desired``'s files against: the digest its ModelArtifact's status holds
    (``resolved``: revision -> digest, as this pass resolved it), else the one a track Deployment of the
    same revision already passes (a promotion builds the stable from the canary's revision); "" if none."""
    if desired.digest or desired.revision in resolved:
        return desired.digest or resolved[desired.revision]
    for body in deployments:
        template = ((body or {}).get("spec") or {}).get("template") or {}
        if (template.get("metadata") or {}).get("labels", {}).get(REVISION_LABEL) != desired.revision:
            continue
        for container in (template.get("spec") or {}).get("initContainers") or []:
            for env in container.get("env") or [] if container.get("name") == "fetch-model" else []:
                if env.get("name") == FILES_DIGEST_ENV and is_digest(env.get("value")):
                    return str(env["value"])
    return ""
