"""The operator's shape: layers that import only downwards, one package per kind over a frame that
names no kind, no import cycle between packages, small modules and small functions.

A unit is a top-level module or package of ``slipway`` (``kube``, ``mlflow``) or, inside a kind's
package, its module or subpackage (``inference.rollout``). Imports under ``if TYPE_CHECKING:`` are
for the type checker only and are not counted.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "operator" / "slipway"

# Lowest first. A unit imports units of its own layer or of a lower one, never of a higher one.
LAYERS: dict[str, set[str]] = {
    # pure pieces every layer uses: time, redaction, the registries of kinds and reasons, settings,
    # the API models' shared parts, status and condition logic, names and labels of children
    "base": {
        "slipway",
        "_version",
        "clock",
        "labelmatchers",
        "promql",
        "reasons",
        "redact",
        "singleflight",
        "settings",
        "models",
        "status",
        "names",
        "podspec",
        "prices",
        "kinds",
        "kindrecord",
        "tls",
        "heap",
        "packed",
    },  # fmt: skip
    # clients of what the operator talks to, and the operator's own bookkeeping
    "clients": {
        "kube",
        "metrics",
        "mlflow",
        "prometheus",
        "config",
        "leader",
        "lease",
        "controller",
        "slots",
        "cost",
        "opencost",
        "tenancy",
        "mlflowcreds",
        "proofkey",
    },  # fmt: skip
    # the frame every kind runs in: the reconcile pass, the child rule, watches, the cache heal
    "frame": {"children", "reconcile", "resync", "watches", "mlflowhook", "behaviour"},
    # the programs Slipway's pods run (trainer, quantizer, validator, fetcher, server)
    "programs": {"workloads"},
    # one package per kind; a TrainingRun and an InferenceDeployment both refer to ModelArtifacts
    "artifact": {"artifact"},
    "kinds": {"training", "inference"},
    # what puts it all together: the operator's entry point, the CRD and RBAC generators, the kubectl plugin, the docs
    "app": {"operator", "kopfpatch", "__main__", "crdgen", "rbacgen", "cli", "reference"},
}
KINDS = ("training", "artifact", "inference")
MAX_MODULE_LINES = 400  # the pydantic API models (each kind's model.py) aside
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] in KINDS:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "slipway"


def _top(unit: str) -> str:
    return unit.split(".")[0]


def _runtime_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    typing_only = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for node in ast.walk(branch)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "slipway":
            if node.module == "slipway":
                yield from ((node.lineno, f"slipway.{a.name}") for a in node.names)
            else:
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("slipway."))


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _edges() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> where (path:line)."""
    modules = _modules()
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, path in modules.items():
        for line, target in _runtime_imports(ast.parse(path.read_text())):
            # "from slipway.x import y" names a module y or a symbol of x: the unit is the same but
            # for a kind's package, where "from slipway.inference import rollout" names inference.rollout
            if target not in modules and target.rsplit(".", 1)[0] in modules:
                target = target.rsplit(".", 1)[0]
            source, imported = _unit(name), _unit(target)
            if source != imported:
                edges[source][imported].append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def _layer_of(unit: str) -> int:
    top = _top(unit)
    for index, members in enumerate(LAYERS.values()):
        if top in members:
            return index
    raise AssertionError(f"slipway.{top} is in no layer of tests/unit/test_layers.py: add it to one")


def test_every_unit_has_a_layer():
    for name in _modules():
        _layer_of(_unit(name))


def test_no_import_climbs_the_layers():
    climbing = [
        f"{where}: {source} imports {imported}"
        for source, targets in _edges().items()
        for imported, places in targets.items()
        for where in places
        if _layer_of(imported) > _layer_of(source)
    ]
    assert climbing == []


def test_the_frame_names_no_kind_and_kinds_share_only_the_artifact():
    crossing = [
        f"{where}: {source} imports {imported}"
        for source, targets in _edges().items()
        for imported, places in targets.items()
        for where in places
        if _top(imported) in KINDS and _top(source) in KINDS and _top(imported) != _top(source)
        and _top(imported) != "artifact"
    ]  # fmt: skip
    assert crossing == []


def _cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def test_no_two_packages_import_each_other():
    assert _cycles(_edges()) == []


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}, "d": {"a": ["w"]}}
    assert _cycles(edges) == [["a", "b", "c"]]  # type: ignore[arg-type]


def test_modules_and_functions_stay_small():
    too_long = []
    for name, path in _modules().items():
        lines = path.read_text().count("\n")
        if lines > MAX_MODULE_LINES and not name.endswith(".model"):
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []


# The frame: what runs every kind's passes. It reads the registry of kinds and their behaviour (slipway.behaviour) and
# names none of them: no kind, no plural, no kind-specific field (the operator's entry point imports
# the kind packages, which register themselves, by package name).
FRAME = {"controller", "children", "reconcile", "resync", "watches", "mlflowhook", "behaviour", "operator"}
KIND_WORD = re.compile(r"training_?runs?|model_?artifacts?|inference_?deployments?|idep\b", re.IGNORECASE)


def _docstrings(tree: ast.Module) -> set[int]:
    scopes = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    bodies = [n for n in ast.walk(tree) if isinstance(n, scopes)]
    return {
        id(node.body[0].value)
        for node in bodies
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }


def kind_names_in_frame() -> list[str]:
    """Every name and string (docstrings and comments aside) in the frame that spells a kind."""
    found = []
    for name, path in _modules().items():
        if _top(_unit(name)) not in FRAME:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                words = [node.value]
            elif isinstance(node, ast.Name):
                words = [node.id]
            elif isinstance(node, ast.Attribute):
                words = [node.attr]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                words = [node.name]
            elif isinstance(node, ast.alias):
                words = [node.asname or node.name]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {w}" for w in words if KIND_WORD.search(w)]
    return found


def test_the_frame_spells_no_kind():
    assert kind_names_in_frame() == []


def test_the_kind_word_finder_finds_kinds():
    spelled = ["TrainingRun", "modelartifacts", "INFERENCE_DEPLOYMENT", "trainingrun", "idep"]
    assert all(KIND_WORD.search(w) for w in spelled)
    assert not any(KIND_WORD.search(w) for w in ["training", "artifact", "inference", "deployments", "runs"])
