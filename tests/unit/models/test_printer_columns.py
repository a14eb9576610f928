"""`kubectl get` fits 120 columns: each kind (`kubectl get tr`, `ma`, `idep`) and the `slipway`
category (`kubectl get slipway`: every kind in one listing, each kind in its own table, its names
written `<kind>.slipway.dev/<name>`), in one namespace and with `-A`.

The tables are laid out as kubectl lays them out (k8s.io/cli-runtime's tab writer: a cell padded
by 3 spaces and at least 6 wide, the last cell of a line unpadded, an absent value shown as
`<none>`), from the generated CRDs' additionalPrinterColumns evaluated on realistic objects:
ordinary names, MLflow versions and run ids, an object just created (no status yet), and every phase
of the kind with the longest reason its `Ready` condition can carry. `-o wide` (the priority-1
columns) is measured and printed, not bounded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml

from slipway import crdgen, reasons
from slipway.artifact.model import QuantizationMethod
from slipway.inference.handler import model_ref
from slipway.inference.model import ServedModel

ROOT = Path(__file__).resolve().parents[3]
LIMIT = 120  # a terminal kubectl users read without wrapping
PADDING, MIN_WIDTH = 3, 6  # cli-runtime's tabwriterPadding and tabwriterMinWidth
NONE = "<none>"  # kubectl's cell for a column whose JSONPath finds nothing

NAMESPACE = "acme-ml-prod"
MODEL = "acme-digits-classifier"
ALIAS = "champion"
AGE = "45d"  # kubectl's age of a creationTimestamp 45 days ago
RUN_ID = "3f9c1a7e5b2d4c8e9a6f0b1d2e3c4a5b"  # an MLflow run id: 32 hex digits
DIGEST = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
NAMES = {
    "TrainingRun": ("acme-digits-train-v3", "acme-clf-faulty"),
    "ModelArtifact": ("acme-digits-train-v3", "acme-digits-hand-tuned"),  # a run's artifact is named as the run
    "InferenceDeployment": ("acme-serve", "acme-clf-faulty"),
}
# The conditions whose reason the Ready condition carries (Ready=False takes the summary's reason).
SUMMARY = {"Ready", "Reconciling", "Stalled", "Held"}
KINDS = {k.kind: k for k in crdgen.KINDS}


def phases(kind: str) -> tuple[str, ...]:
    """Every phase the kind's status model allows."""
    annotation = KINDS[kind].status.model_fields["phase"].annotation
    (literal,) = [a for a in get_args(annotation) if get_origin(a) is Literal]
    return get_args(literal)


def longest_reason(kind: str) -> str:
    """The longest reason the kind's Ready condition can carry (reasons.REASONS)."""
    shown = [r.name for r in reasons.REASONS if kind in r.kinds and SUMMARY & set(r.conditions)]
    return max(shown, key=len)


def _body(kind: str, name: str, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A realistic spec and status (without phase and conditions) of one object."""
    if kind == "TrainingRun":
        spec = {"model": {"name": MODEL}, "resources": {"gpus": 8}, "nodes": 4}
        status = {
            "progress": {"step": 12000, "totalSteps": 20000},
            "restarts": 3,
            "cost": {"summary": "1234.56 USD"},
            "mlflow": {"runId": RUN_ID},
            "artifactRef": {"name": name},
        }
    elif kind == "ModelArtifact":
        method = max(get_args(QuantizationMethod), key=len)
        spec = {"model": {"name": MODEL}, "quantization": {"method": method}}
        status = {"modelVersion": "12", "quantizedVersion": "13", "sizeBytes": 14_483_456_000, "digest": DIGEST}
    else:
        model = {"name": MODEL, "alias": ALIAS} if index % 2 else {"artifactRef": {"name": NAMES["ModelArtifact"][0]}}
        spec = {"model": model, "replicas": 4}
        status = {
            "modelRef": model_ref(ServedModel.model_validate(model)),
            "stable": {"modelName": MODEL, "modelVersion": "12", "weight": 80, "replicas": 4},
            "canary": {"modelName": MODEL, "modelVersion": "13", "weight": 20, "replicas": 1},
            "currentStep": 1,
            "replicas": 5,
        }
    return spec, status


def objects(kind: str) -> list[dict[str, Any]]:
    """One object per name just created (no status yet), then one per phase, with the longest reason."""
    names, reason = NAMES[kind], longest_reason(kind)
    meta = [{"name": n, "namespace": NAMESPACE, "creationTimestamp": "2025-01-01T00:00:00Z"} for n in names]
    out = [{"metadata": m, "spec": _body(kind, m["name"], i)[0]} for i, m in enumerate(meta)]
    for i, phase in enumerate(phases(kind)):
        spec, status = _body(kind, names[i % 2], i)
        ready = {"type": "Ready", "status": "False", "reason": reason}
        status |= {"phase": phase, "conditions": [ready]}
        out.append({"metadata": meta[i % 2], "spec": spec, "status": status})
    return out


_STEP = re.compile(r'\.([A-Za-z]\w*)|\[\?\(@\.(\w+)=="([^"]*)"\)\]')


def evaluate(path: str, obj: Any) -> Any:
    """A printer column's JSONPath (fields, and a filter on a list) on one object."""
    pos = 0
    while pos < len(path):
        step = _STEP.match(path, pos)
        assert step, f"a JSONPath this test cannot evaluate: {path!r} at {pos}"
        pos = step.end()
        if step[1]:
            obj = obj.get(step[1]) if isinstance(obj, dict) else None
        else:
            obj = next((item for item in obj or [] if item.get(step[2]) == step[3]), None)
    return obj


def cell(column: dict[str, Any], obj: dict[str, Any]) -> str:
    value = evaluate(column["jsonPath"], obj)
    if value is None:
        return NONE
    return AGE if column["type"] == "date" else str(value)


def layout(rows: list[list[str]]) -> list[str]:
    """The lines kubectl prints: each column but the last as wide as its widest cell plus padding."""
    widths = [max(MIN_WIDTH, PADDING + max(len(row[i]) for row in rows)) for i in range(len(rows[0]) - 1)]
    return ["".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + row[-1] for row in rows]


def crd(kind: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "crds" / crdgen.file_name(KINDS[kind])).read_text())


def table(kind: str, *, wide: bool, all_namespaces: bool, category: bool) -> list[str]:
    """`kubectl get <kind>` (or the kind's table in `kubectl get slipway`), `-A`, `-o wide`."""
    spec = crd(kind)["spec"]
    (version,) = spec["versions"]
    columns = [c for c in version["additionalPrinterColumns"] if wide or not c.get("priority", 0)]
    prefix = f"{spec['names']['singular']}.{spec['group']}/" if category else ""
    scope = ["NAMESPACE"] if all_namespaces else []
    rows = [[*scope, "NAME", *(c["name"].upper() for c in columns)]]
    for obj in objects(kind):
        meta = obj["metadata"]
        namespace = [meta["namespace"]] if all_namespaces else []
        rows.append([*namespace, prefix + meta["name"], *(cell(c, obj) for c in columns)])
    return layout(rows)


def width(lines: list[str]) -> int:
    return max(map(len, lines))


LISTINGS = {"kind": False, "slipway": True}  # kubectl get <kind> | kubectl get slipway
SCOPES = {"-n": False, "-A": True}


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("listing", LISTINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_kubectl_get_fits(kind, listing, scope):
    lines = table(kind, wide=False, all_namespaces=SCOPES[scope], category=LISTINGS[listing])
    print("\n".join(lines))
    assert width(lines) <= LIMIT, f"kubectl get {listing} {scope} of {kind}: {width(lines)} columns"


def test_widths_table():
    """The widths of every listing, default and `-o wide`; every kind keeps columns for `-o wide`."""
    print(f"\n{'kind':<20} {'listing':<13} {'scope':<5} {'default':>7} {'wide':>5}")
    for kind in KINDS:
        for category in LISTINGS.values():
            for scope, all_namespaces in SCOPES.items():
                default = width(table(kind, wide=False, all_namespaces=all_namespaces, category=category))
                wide = width(table(kind, wide=True, all_namespaces=all_namespaces, category=category))
                get = "get slipway" if category else f"get {KINDS[kind].short_name}"
                print(f"{kind:<20} {get:<13} {scope:<5} {default:>7} {wide:>5}")
                assert wide > default, f"{kind}: no column is left for -o wide"


@pytest.mark.parametrize(
    ("rows", "lines"),
    [
        (  # kubectl get pods: each column as wide as its widest cell and 3 spaces; the last one unpadded
            [["NAME", "READY", "STATUS", "AGE"], ["nginx", "1/1", "Running", "45d"], ["a", "0/1", NONE, "7d23h"]],
            ["NAME    READY   STATUS    AGE", "nginx   1/1     Running   45d", "a       0/1     <none>    7d23h"],
        ),
        ([["NAME", "X", "AGE"], ["a", "1", "5m"]], ["NAME   X     AGE", "a      1     5m"]),  # at least 6 wide
    ],
)
def test_layout_is_kubectls(rows, lines):
    assert layout(rows) == lines


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.model.name", MODEL),
        (".spec.model.alias", None),
        (".status.canary.weight", 20),
        ('.status.conditions[?(@.type=="Ready")].reason', "Analyzing"),
        ('.status.conditions[?(@.type=="Stalled")].reason', None),
    ],
)
def test_evaluate(path, expected):
    obj = {
        "spec": {"model": {"name": MODEL}},
        "status": {"canary": {"weight": 20}, "conditions": [{"type": "Ready", "reason": "Analyzing"}]},
    }
    assert evaluate(path, obj) == expected


def test_longest_values_come_from_the_models():
    assert longest_reason("InferenceDeployment") == "ProgressDeadlineExceeded"
    assert max(phases("ModelArtifact"), key=len) == "Registering"


@pytest.mark.parametrize(
    ("model", "shown"),
    [
        ({"name": MODEL, "alias": ALIAS}, "acme-digits-classifier@champion"),
        ({"artifactRef": {"name": "acme-digits-train-v3"}}, "ma/acme-digits-train-v3"),
    ],
)
def test_the_model_column_merges_an_alias_and_an_artifact(model, shown):
    assert model_ref(ServedModel.model_validate(model)) == shown
