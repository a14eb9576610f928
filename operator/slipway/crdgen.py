"""Generate Slipway's CustomResourceDefinitions from the pydantic models.

``python -m slipway.crdgen crds charts/slipway-crds/files`` writes ``*.yaml`` into each directory
(kustomize's ``crds/`` and the CRD chart's ``files/``, which it renders as templates; the operator
chart's ``files/crds/`` links to ``crds/``); ``--check`` fails when the files in any of them differ
from what the models generate (CI drift check).

The JSON schema pydantic emits is turned into a Kubernetes structural schema:
``$ref`` inlined, ``title`` dropped, ``Optional`` unwrapped (absent, not null),
``additionalProperties: false`` dropped (the API server prunes unknown fields
instead), exclusive bounds in OpenAPI v3.0's boolean form, defaults kept only
for scalars and lists of scalars.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from slipway import GROUP, VERSION, kinds
from slipway.artifact.model import ModelArtifactSpec, ModelArtifactStatus
from slipway.inference.model import InferenceDeploymentSpec, InferenceDeploymentStatus
from slipway.training.model import TrainingRunSpec, TrainingRunStatus

Schema = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """One custom resource kind and how kubectl shows it."""

    kind: str
    plural: str
    short_name: str
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    columns: tuple[dict[str, Any], ...]
    rules: tuple[dict[str, str], ...] = ()  # CEL on the whole object (spec against status)
    scale: dict[str, str] | None = None  # the scale subresource (what an HPA targets)


def _ready_column() -> dict[str, Any]:
    return {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}


def _reason_column() -> dict[str, Any]:
    """The Ready condition's reason; the longest (``CreateContainerConfigError``) would take ``kubectl get``
    past 120 columns, so ``-o wide`` shows it."""
    return {
        "name": "Reason",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        "priority": 1,
    }


def frozen_spec_rule(spec: type[BaseModel], once: str, mutable: tuple[str, ...], message: str) -> dict[str, str]:
    """A transition rule: once ``oldSelf.status.<once>`` is set, every spec field but ``mutable``
    keeps its value (present or absent alike)."""
    names = [f.alias or n for n, f in spec.model_fields.items() if (f.alias or n) not in mutable]
    same = " && ".join(
        f"(has(self.spec.{n}) ? has(oldSelf.spec.{n}) && self.spec.{n} == oldSelf.spec.{n} : !has(oldSelf.spec.{n}))"
        for n in names
    )
    return {"rule": f"!has(oldSelf.status) || !has(oldSelf.status.{once}) || ({same})", "message": message}


def _age_column() -> dict[str, Any]:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


# Columns at priority 0 fit `kubectl get` of each kind, and of the `slipway` category (names as
# `<kind>.slipway.dev/<name>`), in 120 columns with `-A` (tests/unit/models/test_printer_columns.py);
# the rest are priority 1, shown by `kubectl get -o wide`.
KINDS = (
    Kind(
        kind="TrainingRun",
        plural=kinds.TRAINING_RUN.plural,
        short_name=kinds.TRAINING_RUN.short,
        spec=TrainingRunSpec,
        status=TrainingRunStatus,
        description="A training run: Jobs on GPU nodes with checkpoint/resume, an MLflow run, "
        "and the ModelArtifact it produces when it succeeds.",
        columns=(
            {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "priority": 1},
            {"name": "GPUs", "type": "integer", "jsonPath": ".spec.resources.gpus", "priority": 1},
            {"name": "Nodes", "type": "integer", "jsonPath": ".spec.nodes", "priority": 1},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
            {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
            {"name": "Cost", "type": "string", "jsonPath": ".status.cost.summary", "priority": 1},
            _ready_column(),
            _reason_column(),
            {"name": "Run", "type": "string", "jsonPath": ".status.mlflow.runId", "priority": 1},
            {"name": "Artifact", "type": "string", "jsonPath": ".status.artifactRef.name", "priority": 1},
            _age_column(),
        ),
        rules=(
            frozen_spec_rule(
                TrainingRunSpec,
                "startTime",
                ("suspend",),
                "spec is immutable once training has started (status.startTime): only spec.suspend may change; "
                "create a new TrainingRun for a new spec",
            ),
        ),
    ),
    Kind(
        kind="ModelArtifact",
        plural=kinds.MODEL_ARTIFACT.plural,
        short_name=kinds.MODEL_ARTIFACT.short,
        spec=ModelArtifactSpec,
        status=ModelArtifactStatus,
        description="One immutable model version in MLflow: registered, quantized and validated "
        "against gates before its aliases move.",
        columns=(
            {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "priority": 1},
            {"name": "Version", "type": "string", "jsonPath": ".status.modelVersion"},
            {"name": "Method", "type": "string", "jsonPath": ".spec.quantization.method", "priority": 1},
            {"name": "Quantized", "type": "string", "jsonPath": ".status.quantizedVersion"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            _ready_column(),
            _reason_column(),
            {"name": "Size", "type": "integer", "jsonPath": ".status.sizeBytes", "priority": 1},
            {"name": "Digest", "type": "string", "jsonPath": ".status.digest", "priority": 1},
            _age_column(),
        ),
    ),
    Kind(
        kind="InferenceDeployment",
        plural=kinds.INFERENCE_DEPLOYMENT.plural,
        short_name=kinds.INFERENCE_DEPLOYMENT.short,
        spec=InferenceDeploymentSpec,
        status=InferenceDeploymentStatus,
        description="Serves a validated model on autoscaled replicas and moves traffic to new "
        "versions through canary steps gated by Prometheus analysis, with automatic rollback.",
        columns=(
            {"name": "Model", "type": "string", "jsonPath": ".status.modelRef", "priority": 1},
            {"name": "Stable", "type": "string", "jsonPath": ".status.stable.modelVersion"},
            {"name": "Canary", "type": "string", "jsonPath": ".status.canary.modelVersion"},
            {"name": "Weight", "type": "integer", "jsonPath": ".status.canary.weight"},
            {"name": "Step", "type": "integer", "jsonPath": ".status.currentStep", "priority": 1},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            _ready_column(),
            _reason_column(),
            _age_column(),
        ),
        # The HPA scales the whole InferenceDeployment; Slipway splits spec.replicas between the tracks.
        scale={
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    ),
)


def _is_scalar_default(value: Any) -> bool:
    if isinstance(value, str | int | float | bool):
        return True
    return isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value)


def structural(schema: Schema, defs: dict[str, Schema]) -> Schema:
    """Turn one pydantic JSON schema node into a Kubernetes structural schema node."""
    node = copy.deepcopy(schema)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        node = {**copy.deepcopy(target), **node}  # the field's description wins over the class's
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union of {len(options)} types in a structural schema: {options}")
        inner = structural(options[0], defs)
        for key in ("description", "default"):
            if key in node:
                inner[key] = node[key]
        validations = inner.get("x-kubernetes-validations", []) + node.get("x-kubernetes-validations", [])
        node = {**inner, **{k: v for k, v in node.items() if k != "x-kubernetes-validations"}}
        if validations:
            node["x-kubernetes-validations"] = validations
    node.pop("title", None)
    if node.get("default") is None or not _is_scalar_default(node["default"]):
        node.pop("default", None)
    if node.get("additionalProperties") is False:
        node.pop("additionalProperties")
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        # JSON Schema 2020-12 writes exclusive bounds as numbers; OpenAPI v3.0 (CRDs) as booleans.
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            node[limit] = node.pop(bound)
            node[bound] = True
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    if node.get("x-kubernetes-preserve-unknown-fields"):
        node.pop("additionalProperties", None)
        node["type"] = "object"
    if node.get("x-kubernetes-int-or-string"):
        node.pop("type", None)
    if "properties" in node:
        node["properties"] = {k: structural(v, defs) for k, v in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = structural(node["additionalProperties"], defs)
    if "items" in node:
        node["items"] = structural(node["items"], defs)
    return node


def model_schema(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return structural(raw, defs)


def crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    spec_schema = model_schema(kind.spec)
    status_schema = model_schema(kind.status)
    spec_schema["description"] = kind.spec.__doc__ or ""
    status_schema["description"] = kind.status.__doc__ or ""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": [kind.short_name],
                "categories": ["slipway"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, **({"scale": kind.scale} if kind.scale else {})},
                    "additionalPrinterColumns": list(kind.columns),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": kind.description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {
                                    "type": "string",
                                    "description": "API version: slipway.dev/v1alpha1.",
                                },
                                "kind": {"type": "string", "description": f"Always {kind.kind}."},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                            **({"x-kubernetes-validations": list(kind.rules)} if kind.rules else {}),
                        }
                    },
                }
            ],
        },
    }


HEADER = "# Generated by `make crds` from operator/slipway/models; do not edit by hand.\n"


def render(kind: Kind) -> str:
    return HEADER + yaml.safe_dump(crd(kind), sort_keys=False, width=120)


def file_name(kind: Kind) -> str:
    return f"{GROUP}_{kind.plural}.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slipway.crdgen", description=__doc__.splitlines()[0])
    parser.add_argument(
        "directories",
        type=Path,
        nargs="+",
        metavar="DIRECTORY",
        help="where the CRD files live (crds/, the charts' crds/ and files/)",
    )
    parser.add_argument("--check", action="store_true", help="fail if the files differ from the models")
    args = parser.parse_args(argv)
    drift = []
    for directory in args.directories:
        for kind in KINDS:
            path = directory / file_name(kind)
            text = render(kind)
            if args.check:
                if not path.exists() or path.read_text() != text:
                    drift.append(str(path))
            else:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if drift:
        print(f"CRDs out of date with the models: {', '.join(drift)}; run `make crds`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
