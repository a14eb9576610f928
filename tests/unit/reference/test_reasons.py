"""The reasons registry (slipway.reasons) holds every condition reason the operator sets: its source
is read and each reason literal given to a condition helper must be a row, under a condition the
row names; the rollback rows are the rollout's RollbackReason; the committed troubleshooting page
is what the registry generates."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from slipway import metrics, reasons
from slipway.inference import rollbacks
from slipway.reference import pages
from slipway.reference.__main__ import main as reference_main

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "operator" / "slipway"
REASON = re.compile(r"^[A-Z][A-Za-z]+$")

# Call -> (index of the reason argument, condition it is set under; None: the summary argument's).
SUMMARY = {"ready": "Ready", "reconciling": "Reconciling", "stalled": "Stalled", "held": "Held"}
CALLS: dict[str, tuple[int, str | None]] = {
    **{name: (0, condition) for name, condition in SUMMARY.items()},
    "_state": (2, None),  # (phase, summary, reason, message) of the TrainingRun and ModelArtifact states
    "_plan": (2, None),  # (phase, summary, reason, message) of the InferenceDeployment's plan
    "make_plan": (2, None),
    "source_failed": (0, "Stalled"),
    "rollback": (0, "Stalled"),
    "revert": (0, "Stalled"),
    "NotAllowed": (1, "Stalled"),
}


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _literals(node: ast.AST, scope: ast.AST, constants: dict[str, str], followed: frozenset[str] = frozenset()
              ) -> Iterator[str]:  # fmt: skip
    """Reason-like strings ``node`` may be: constants, both branches of ``a if test else b``, a name
    followed to what it is assigned in ``scope`` (else a module constant), an f-string as its source."""
    if isinstance(node, ast.Name):
        if node.id in followed:
            return
        followed |= {node.id}
        assigned = [s.value for s in ast.walk(scope) if isinstance(s, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == node.id for t in s.targets)]  # fmt: skip
        for value in assigned:
            yield from _literals(value, scope, constants, followed)
        if not assigned and REASON.match(constants.get(node.id, "")):
            yield constants[node.id]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and REASON.match(node.value):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        yield ast.unparse(node)
    elif isinstance(node, ast.IfExp):
        yield from _literals(node.body, scope, constants, followed)
        yield from _literals(node.orelse, scope, constants, followed)
    elif isinstance(node, ast.BoolOp | ast.Tuple):  # x or "Default"; (reason, message)
        for value in node.values if isinstance(node, ast.BoolOp) else node.elts[:1]:
            yield from _literals(value, scope, constants, followed)


def _summary(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return SUMMARY.get(node.value)
    return SUMMARY.get(_name(node)) if isinstance(node, ast.Name | ast.Attribute) else None


def _module_strings(tree: ast.Module) -> dict[str, str]:
    return {t.id: s.value.value for s in tree.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
            and isinstance(s.value.value, str) for t in s.targets if isinstance(t, ast.Name)}  # fmt: skip


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef]:
    yield from (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))


def set_reasons(path: Path) -> Iterator[tuple[str, str | None, int]]:
    """(reason, condition or None when unknown, line) of every reason literal the module sets."""
    tree = ast.parse(path.read_text())
    constants = _module_strings(tree)
    for func in _functions(tree):
        for node in ast.walk(func):
            if isinstance(node, ast.Call):
                yield from _call(node, func, constants)
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and node.value.elts:
                # (reason, message) / (reason, summary, delay) producers, e.g. kueue.queued, reconcile._failure
                annotation = ast.unparse(func.returns) if func.returns else ""
                if annotation.startswith("tuple[str,"):
                    elts = node.value.elts
                    condition = _summary(elts[1]) if len(elts) > 1 else None
                    yield from ((r, condition, node.lineno) for r in _literals(elts[0], func, constants))
        for arg, default in zip(reversed(func.args.args), reversed(func.args.defaults), strict=False):
            if arg.arg == "reason":  # a reason parameter's default (tenancy.NotAllowed)
                yield from ((r, None, func.lineno) for r in _literals(default, func, constants))


def _call(node: ast.Call, func: ast.FunctionDef, constants: dict[str, str]) -> Iterator[tuple[str, str | None, int]]:
    name = _name(node.func)
    for keyword in node.keywords:
        if keyword.arg == "degraded" and isinstance(keyword.value, ast.Tuple):
            yield from ((r, "Degraded", node.lineno) for r in _literals(keyword.value.elts[0], func, constants))
        if keyword.arg == "reason" and name in CALLS:
            yield from ((r, CALLS[name][1], node.lineno) for r in _literals(keyword.value, func, constants))
    if name == "Cond" and len(node.args) > 2:
        kind = node.args[0]
        condition = (kind.value if isinstance(kind, ast.Constant) else constants.get(kind.id)
                     if isinstance(kind, ast.Name) else None)  # fmt: skip
        yield from ((r, condition, node.lineno) for r in _literals(node.args[2], func, constants))
    elif name in CALLS and len(node.args) > CALLS[name][0]:
        index, condition = CALLS[name]
        if condition is None:
            condition = _summary(node.args[1])
        yield from ((r, condition, node.lineno) for r in _literals(node.args[index], func, constants))


def _sources() -> list[Path]:
    skip = ("workloads", "cli")  # pods' code and the kubectl plugin set no condition
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in skip]


# Reasons made from a template: each expansion must be a row.
TEMPLATES = {"f'Artifact{phase}'": ("ArtifactRejected", "ArtifactFailed")}


def found() -> list[tuple[str, str | None, str]]:
    return [(r, c, f"{p.relative_to(ROOT)}:{line}") for p in _sources() for r, c, line in set_reasons(p)]


def test_every_reason_the_operator_sets_is_a_row_under_a_condition_it_names():
    seen = [(expanded, c, where) for r, c, where in found() for expanded in TEMPLATES.get(r, (r,))]
    missing = sorted({f"{r} ({where})" for r, _, where in seen if r not in reasons.BY_NAME})
    assert not missing, f"add these to slipway/reasons.py: {missing}"
    wrong = sorted({f"{r} under {c} ({where})" for r, c, where in seen if c and c not in reasons.BY_NAME[r].conditions})
    assert not wrong, f"slipway/reasons.py does not name these conditions: {wrong}"


def test_the_scan_sees_each_way_a_reason_is_set():
    """The scanner itself: it must find a reason of every shape, or the test above proves nothing."""
    seen = {(r, c) for r, c, _ in found()}
    for shape in [("NewGeneration", "Reconciling"), ("InvalidSpec", "Stalled"), ("OwnedByOther", "Stalled"),
                  ("ModelNotAllowed", None), ("ExperimentNotAllowed", "Stalled"), ("HostnameNotAllowed", "Stalled"),
                  ("ExceedsQueueQuota", "Stalled"), ("PreemptedByKueue", None), ("Suspended", "Held"),
                  ("PermanentExitCode", None), ("Unschedulable", None), ("GateFailed", "Stalled"),
                  ("TrainingRunFailed", "Stalled"), ("Done", None), ("RegistryUpdateRefused", "RegistrySynced"),
                  ("MlflowRunTooLarge", "MlflowRunRead"), ("BakeFailed", "Stalled"), ("Paused", "Held"),
                  ("StableUnavailable", "Degraded"), ("ModelUnavailable", "Degraded")]:  # fmt: skip
        assert shape in seen, shape
    assert len({r for r, _ in seen}) >= 60


def test_rows_are_unique_and_name_known_conditions_and_kinds():
    names = [r.name for r in reasons.REASONS]
    assert len(names) == len(set(names))
    conditions = {"Ready", "Reconciling", "Stalled", "Held", "Degraded", "Registered", "Quantized", "Validated",
                  "RegistrySynced", "MlflowRunRead"}  # fmt: skip
    for row in reasons.REASONS:
        assert row.conditions and set(row.conditions) <= conditions, row
        assert row.kinds and set(row.kinds) <= set(reasons.ANY), row
        assert row.meaning and row.fix and "|" not in row.meaning + row.fix, row


def test_rollback_rows_are_the_rollouts_reasons_and_the_metrics_precreated_series():
    marked = tuple(r.name for r in reasons.REASONS if r.rollback)
    assert set(marked) == set(reasons.ROLLBACK_REASONS) and len(marked) == len(reasons.ROLLBACK_REASONS)
    assert rollbacks.ROLLBACK_REASONS is reasons.ROLLBACK_REASONS is metrics.ROLLBACK_REASONS
    assert "BakeFailed" in marked


def test_the_committed_reasons_page_is_what_the_registry_generates(tmp_path):
    committed = ROOT / "docs" / "reference" / "reasons.md"
    assert committed.read_text() == pages()["reasons.md"](), "run `make reference`"
    assert reference_main([str(tmp_path)]) == 0 and reference_main(["--check", str(tmp_path)]) == 0
    (tmp_path / "reasons.md").write_text("hand-edited\n")
    assert reference_main(["--check", str(tmp_path)]) == 1
    page = pages()["reasons.md"]()
    assert all(f"| `{r.name}`" in page for r in reasons.REASONS)


def test_a_new_reason_is_caught(tmp_path):
    """A reason set in any of the shapes and missing from the registry is found, with its condition."""
    module = tmp_path / "new.py"
    module.write_text(
        "def step(ctx, exc) -> None:\n"
        "    ctx.write(stalled('BrandNewReason', 'msg'))\n"
        "    why = 'OtherNewReason' if exc else 'InvalidSpec'\n"
        "    return _plan('Paused', held, why, 'msg', degraded=('ThirdNewReason', 'msg'))\n"
        "def pair() -> tuple[str, str]:\n"
        "    return 'FourthNewReason', 'msg'\n"
    )
    seen = {(r, c) for r, c, _ in set_reasons(module)}
    assert seen == {("BrandNewReason", "Stalled"), ("OtherNewReason", "Held"), ("InvalidSpec", "Held"),
                    ("ThirdNewReason", "Degraded"), ("FourthNewReason", None)}  # fmt: skip
