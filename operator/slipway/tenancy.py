"""Tenancy: which MLflow models, experiments and sources a namespace may use (pure).

Cluster admins set the Namespace annotation ``slipway.dev/allowed-models`` (comma-separated
globs, e.g. ``team-a-*, shared-embeddings``); namespaces' annotations are theirs to set (RBAC
on namespaces), not the tenants'. Where the annotation is set, the globs decide every MLflow name
a spec reaches: the registered model, the experiment a TrainingRun logs to, and whatever a
ModelArtifact's source points at (a run is allowed only if its experiment is; a ``models:/`` URI
only if its model is; an ``mlflow-artifacts:/`` URI only if its experiment is; any other scheme
not at all). With ``--require-model-allowlist`` (multi-tenant mode, the default of ``manifests/``
and the chart) a namespace without the annotation may use nothing, so no tenant can move
another's aliases, tag its versions or copy its weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from slipway.config import parse_list
from slipway.mlflow.proof import Guard, Proof
from slipway.mlflow.uris import decoded, parse_model_uri, parse_run_uri, path_hazard
from slipway.redact import redact_url

ALLOWED_MODELS = "slipway.dev/allowed-models"
# Admin knobs of a shared cluster, on the Namespace (tenants cannot set them):
# the PriorityClasses the namespace's pods may use (globs); absent: any in single-team mode, only the
# operator's default for the kind with --require-model-allowlist.
ALLOWED_PRIORITY_CLASSES = "slipway.dev/allowed-priority-classes"
# The RuntimeClasses the namespace's pods may use (globs; a runtime class picks the container runtime,
# and with it what the pods reach of the node: NVIDIA's devices, a VM's isolation); absent: any in
# single-team mode, none with --require-model-allowlist.
ALLOWED_RUNTIME_CLASSES = "slipway.dev/allowed-runtime-classes"
# The hostnames an HTTPRoute of the namespace may claim (globs, e.g. ``*.team-a.example.com``);
# absent: any in single-team mode, none with --require-model-allowlist.
ALLOWED_HOSTNAMES = "slipway.dev/allowed-hostnames"
# Gateways of other namespaces an HTTPRoute of the namespace may attach to (``namespace/name`` globs),
# beside the operator's --allowed-gateways; a Gateway in the namespace itself is always allowed.
ALLOWED_GATEWAYS = "slipway.dev/allowed-gateways"
# MLflow experiments and registered models (globs) the namespace uses although Slipway did not make
# them (no slipway.dev/proof tag, slipway.mlflow.proof): an admin's word that the name is the team's own.
ADOPT_MLFLOW_NAMES = "slipway.dev/adopt-mlflow-names"
ARTIFACTS_SCHEME = "mlflow-artifacts:"

What = Literal["model", "experiment"]


class NotAllowed(Exception):
    """A spec reaches an MLflow name or source its namespace may not use; the message names the field."""

    def __init__(self, message: str, reason: str = "ModelNotAllowed") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Use:
    """One MLflow name a spec uses, and the field that names it."""

    field: str
    what: What
    name: str


@dataclass(frozen=True)
class UriTarget:
    """What a source URI reaches: a registered model, a run, an experiment (by id) or an MLflow 3
    logged model (by id; its experiment is MLflow's to tell, as a run's is)."""

    model: str | None = None
    run_id: str | None = None
    experiment_id: str | None = None
    logged_model: str | None = None


def allowed_patterns(namespace: Mapping[str, Any] | None, annotation: str = ALLOWED_MODELS) -> list[str] | None:
    """The namespace's globs in ``annotation``, or None when it has no such annotation."""
    annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(annotation)
    return None if value is None else list(parse_list(str(value)))


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class Policy:
    """The allow-list of one namespace; inactive (everything allowed) in single-team mode."""

    namespace: str
    patterns: tuple[str, ...] | None
    required: bool = False
    priority_classes: tuple[str, ...] | None = None  # None: any
    gateways: tuple[str, ...] = ()  # other namespaces' Gateways, namespace/name globs
    hostnames: tuple[str, ...] | None = None  # globs of the hostnames its routes may claim; None: not set
    adopt_names: tuple[str, ...] = ()  # MLflow names used without Slipway's proof (globs)
    runtime_classes: tuple[str, ...] | None = None  # None: not set

    @classmethod
    def of(
        cls,
        namespace_name: str,
        namespace: Mapping[str, Any] | None,
        required: bool,
        cluster_gateways: Iterable[str] = (),
        cluster_adopt_names: Iterable[str] = (),
    ) -> Policy:
        patterns = allowed_patterns(namespace)
        adopt = (*cluster_adopt_names, *(allowed_patterns(namespace, ADOPT_MLFLOW_NAMES) or []))
        classes = allowed_patterns(namespace, ALLOWED_PRIORITY_CLASSES)
        gateways = [*cluster_gateways, *(allowed_patterns(namespace, ALLOWED_GATEWAYS) or [])]
        hostnames = allowed_patterns(namespace, ALLOWED_HOSTNAMES)
        runtimes = allowed_patterns(namespace, ALLOWED_RUNTIME_CLASSES)
        return cls(
            namespace_name,
            tuple(patterns) if patterns is not None else None,
            required,
            tuple(classes) if classes is not None else None,
            tuple(gateways),
            tuple(hostnames) if hostnames is not None else None,
            tuple(adopt),
            tuple(runtimes) if runtimes is not None else None,
        )

    def guard(self, proof: Proof | None, owner: str, trusted: Iterable[str] = ()) -> Guard:
        """What a pass of ``owner`` (namespace/name) trusts in MLflow: proofs are enforced where the
        allow-list is (a single-team cluster has no names to squat); ``trusted`` (``experiment:<name>``,
        ``experiment-id:<id>``, ``model:<name>``) are what the object's own status already records."""
        return Guard(proof, self.namespace, owner, self.active, frozenset(trusted), self.adopt_names)

    def priority_class(self, asked: str | None, field: str, default: str) -> str:
        """The PriorityClass the pods get: the one the spec names (``field``) if the namespace may use
        it, else NotAllowed; without one, the operator's ``default`` if allowed, else none (""). In
        multi-tenant mode a namespace without the annotation may use the ``default`` alone."""
        classes = self.priority_classes
        if classes is None and self.required:
            classes = (default,) if default else ()
            why = (
                f"it has no {ALLOWED_PRIORITY_CLASSES} annotation and the operator runs with "
                f"--require-model-allowlist: only the operator's default, {default or 'none'}"
            )
        else:
            why = f"its {ALLOWED_PRIORITY_CLASSES} annotation allows {', '.join(classes or ()) or 'none'}"
        if asked:
            if classes is not None and not _matches(asked, classes):
                raise NotAllowed(
                    f"{field}: PriorityClass {asked!r} is not allowed in namespace {self.namespace} ({why}); name "
                    "an allowed class or none, or a cluster admin adds it to the annotation",
                    "PriorityClassNotAllowed",
                )
            return asked
        return default if default and (classes is None or _matches(default, classes)) else ""

    def check_runtime_class(self, asked: str | None, field: str) -> None:
        """The RuntimeClass the spec names (``field``) is one the namespace may use, else NotAllowed."""
        classes = self.runtime_classes
        if not asked or (classes is None and not self.required) or _matches(asked, classes or ()):
            return
        why = (
            f"its {ALLOWED_RUNTIME_CLASSES} annotation allows {', '.join(classes) or 'none'}"
            if classes is not None
            else f"it has no {ALLOWED_RUNTIME_CLASSES} annotation and the operator runs with --require-model-allowlist"
        )
        raise NotAllowed(
            f"{field}: RuntimeClass {asked!r} is not allowed in namespace {self.namespace} ({why}); name an "
            "allowed class or none, or a cluster admin adds it to the annotation",
            "RuntimeClassNotAllowed",
        )

    def check_gateways(self, refs: Iterable[tuple[str, str]], field: str) -> None:
        """Each (namespace, name) of spec.traffic.parentRefs is in this namespace or allowed."""
        for i, (namespace, name) in enumerate(refs):
            if namespace == self.namespace or _matches(f"{namespace}/{name}", self.gateways):
                continue
            allowed = ", ".join(self.gateways) or "none"
            raise NotAllowed(
                f"{field}[{i}]: Gateway {namespace}/{name} is in another namespace and not allowed here "
                f"(--allowed-gateways and namespace {self.namespace}'s {ALLOWED_GATEWAYS} annotation allow "
                f"{allowed}); use a Gateway of this namespace, or a cluster admin allows that one",
                "GatewayNotAllowed",
            )

    def check_hostnames(self, hostnames: Iterable[str], field: str) -> None:
        """Each hostname of spec.traffic.hostnames matches the namespace's allowed-hostnames globs (a
        wildcard ``*.x`` only a glob that covers it, e.g. ``*.x`` itself); without the annotation any
        in single-team mode, none in multi-tenant mode."""
        allowed = self.hostnames if self.hostnames is not None or not self.required else ()
        if allowed is None:
            return
        for i, hostname in enumerate(hostnames):
            if _matches(hostname, allowed):
                continue
            where = (
                f"its {ALLOWED_HOSTNAMES} annotation allows {', '.join(allowed) or 'none'}"
                if self.hostnames is not None
                else f"it has no {ALLOWED_HOSTNAMES} annotation and the operator runs with --require-model-allowlist"
            )
            raise NotAllowed(
                f"{field}[{i}]: hostname {hostname} is not allowed in namespace {self.namespace} ({where}); name "
                "an allowed hostname, or a cluster admin adds it to the annotation (comma-separated globs)",
                "HostnameNotAllowed",
            )

    @property
    def active(self) -> bool:
        return self.patterns is not None or self.required

    def allows(self, name: str) -> bool:
        return not self.active or _matches(name, self.patterns or ())

    def where(self) -> str:
        if self.patterns:
            return f"namespace {self.namespace} allows {', '.join(self.patterns)}"
        if self.patterns is not None:
            return f"namespace {self.namespace} allows nothing (its {ALLOWED_MODELS} annotation is empty)"
        return (
            f"namespace {self.namespace} has no {ALLOWED_MODELS} annotation and the operator runs with "
            "--require-model-allowlist"
        )

    def fix(self) -> str:
        return f"a cluster admin adds it to the namespace's {ALLOWED_MODELS} annotation (comma-separated globs)"

    def refusal(self, uses: Iterable[Use]) -> NotAllowed | None:
        """The first use this namespace may not make, or None."""
        for use in uses:
            if not self.allows(use.name):
                reason = "ModelNotAllowed" if use.what == "model" else "ExperimentNotAllowed"
                return NotAllowed(
                    f"{use.field}: MLflow {use.what} {use.name!r} is not allowed here: {self.where()}; {self.fix()}",
                    reason,
                )
        return None

    def check(self, uses: Iterable[Use]) -> None:
        refused = self.refusal(uses)
        if refused is not None:
            raise refused

    def source_refusal(self, field: str, detail: str) -> NotAllowed:
        return NotAllowed(f"{field}: {detail}: {self.where()}; {self.fix()}", "SourceNotAllowed")


def uri_target(uri: str, field: str) -> UriTarget:
    """What a model URI reaches, for the allow-list; NotAllowed (naming ``field``) for a URI whose
    owner cannot be told: another scheme, a path that does not mean what it reads
    as once percent-decoded (``..``, ``%2e%2e``, ``.``, ``//``, a backslash, a control character),
    a name that reads otherwise decoded."""
    shown = redact_url(uri)
    hazard = path_hazard(uri)
    if hazard is not None:
        raise NotAllowed(
            f"{field}: {shown!r} is refused: {hazard}; name the artifact directly, with no '.', '..', "
            "'//' or backslash, encoded or not",
            "SourceNotAllowed",
        )
    target = _target(uri, field)
    plain = decoded(uri)
    if plain is not None and plain != uri and _target(plain, field) != target:
        raise NotAllowed(
            f"{field}: {shown!r} names its model, run or experiment percent-encoded, which MLflow may "
            "read as another; write the name as it is",
            "SourceNotAllowed",
        )
    return target


def _target(uri: str, field: str) -> UriTarget:
    model = parse_model_uri(uri)
    if model is not None:
        if model.version is None and model.alias is None:
            return UriTarget(logged_model=model.name)
        return UriTarget(model=model.name)
    run = parse_run_uri(uri)
    if run is not None:
        return UriTarget(run_id=run.run_id)
    if uri.startswith(ARTIFACTS_SCHEME):
        rest = uri[len(ARTIFACTS_SCHEME) :]
        if rest.startswith("//"):  # mlflow-artifacts://host:port/<experiment>/...
            rest = rest[2:].partition("/")[2]
        experiment = rest.strip("/").split("/", 1)[0]
        if experiment.isdigit():
            return UriTarget(experiment_id=experiment)
        raise NotAllowed(
            f"{field}: {uri!r} is not under an experiment (mlflow-artifacts:/<experiment id>/<run id>/...)",
            "SourceNotAllowed",
        )
    scheme = uri.split(":", 1)[0] if ":" in uri else "a local path"
    raise NotAllowed(
        f"{field}: {scheme!r} URIs are not allowed where the model allow-list applies (only runs:/, models:/ "
        "and mlflow-artifacts:/, whose owner MLflow tells); register the model in MLflow and name that version",
        "SourceNotAllowed",
    )


def inside_run(uri: str, run_id: str, artifact_root: str) -> bool:
    """``uri`` is in run ``run_id``'s own artifacts: ``runs:/<run_id>[/<path>]``, or the run's
    artifact location (``mlflow-artifacts:/<experiment>/<run>/artifacts``, as MLflow gives it) or a
    path under it; written plainly (nothing percent-encoded, no path hazard)."""
    if path_hazard(uri) is not None or decoded(uri) != uri:
        return False
    run = parse_run_uri(uri)
    if run is not None:
        return run.run_id == run_id
    root = artifact_root.rstrip("/")
    return bool(root) and (uri.rstrip("/") == root or uri.startswith(root + "/"))


def refusal(
    namespace_name: str, namespace: Mapping[str, Any] | None, models: Iterable[str], required: bool
) -> str | None:
    """Why these models may not be used in this namespace, or None when they may."""
    refused = Policy.of(namespace_name, namespace, required).refusal(Use("spec.model.name", "model", m) for m in models)
    return str(refused) if refused else None
