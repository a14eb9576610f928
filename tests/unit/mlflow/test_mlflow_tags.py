"""Slipway's MLflow tags: one table (slipway.mlflow.tags, with the programs' tags of
slipway.mlflow.programtags), one naming style (``slipway.dev/<name>``), the names earlier versions
wrote still read; and no tag named anywhere but in the table."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from slipway.mlflow import programtags, tags
from slipway.mlflow.programtags import ATTEMPTS, FAULT
from slipway.mlflow.tag import Tag
from slipway.mlflow.tags import METRIC, TAGS
from slipway.reference import labels
from slipway.training.cost import COST_METRICS

PACKAGE = Path(tags.__file__).resolve().parents[1]
TABLE = {Path(module.__file__).resolve() for module in (tags, programtags)}


@pytest.mark.parametrize(
    ("written", "read", "where"),
    [
        ({"slipway.dev/attempts": "3"}, "3", "slipway.dev/attempts"),
        ({"slipway.attempts": "2"}, "2", "slipway.attempts"),  # a run of an earlier version
        ({"slipway.attempts": "2", "slipway.dev/attempts": "3"}, "3", "slipway.dev/attempts"),  # the new name wins
        ({"slipway.dev/attempts": ""}, "", "slipway.dev/attempts"),  # set, if empty
        ({"other": "1"}, None, "slipway.dev/attempts"),
    ],
    ids=["new", "earlier-name", "both", "empty", "neither"],
)
def test_a_tag_is_read_under_its_name_else_its_earlier_one(written: dict[str, str], read: str | None, where: str):
    assert ATTEMPTS.read(written) == read
    assert ATTEMPTS.where(written) == where


def test_a_family_member_and_the_members_of_a_family() -> None:
    accuracy = METRIC.of("accuracy")
    assert (accuracy.name, accuracy.formerly) == ("slipway.dev/metric-accuracy", "slipway.metric.accuracy")
    assert not accuracy.family and accuracy.read({"slipway.metric.accuracy": "0.9"}) == "0.9"
    found = {"slipway.metric.loss": "1", "slipway.dev/metric-loss": "2", "slipway.dev/metric-f1": "3", "x": "4"}
    assert METRIC.members(found) == {"loss": "slipway.dev/metric-loss", "f1": "slipway.dev/metric-f1"}
    assert FAULT.members({"slipway.fault.errorRate": "1"}) == {"errorRate": "slipway.fault.errorRate"}
    with pytest.raises(AssertionError):
        ATTEMPTS.of("x")


def test_one_naming_style_and_no_name_twice() -> None:
    names = [t.name for t in TAGS]
    former = [t.formerly for t in TAGS if t.formerly]
    assert len(set(names)) == len(names) and len(set(former)) == len(former)
    assert all(n.startswith("slipway.dev/") and n.removeprefix("slipway.dev/") for n in names)
    assert not any(f.startswith("slipway.dev/") for f in former)  # only the other style was renamed
    assert all(t.name.endswith("-") == t.family for t in TAGS)
    for tag in TAGS:
        assert tag.on and tag.written_by and tag.read_by and tag.meaning, tag.name


def _tag_variables() -> dict[str, Tag]:
    found = {**vars(tags), **vars(programtags)}
    return {name: value for name, value in found.items() if isinstance(value, Tag)}


def test_the_table_holds_every_tag_the_module_defines() -> None:
    assert sorted(t.name for t in _tag_variables().values()) == sorted(t.name for t in TAGS)


def _code() -> dict[Path, ast.Module]:
    """Every module of the package but the table itself and the reference generators (which print it)."""
    return {
        path: ast.parse(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in TABLE and "reference" not in path.relative_to(PACKAGE).parts
    }


def _strings(tree: ast.Module) -> list[str]:
    """The string constants of a module, its docstrings left out."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_no_tag_is_named_outside_the_table() -> None:
    """A tag name written as a literal elsewhere would escape the table, its docs and the reading of
    its earlier name: every ``slipway.`` string of the code is a label or annotation (documented in
    slipway.reference.labels), a module (a logger's name), or a metric Slipway logs to MLflow."""
    tag_names = {t.name for t in TAGS} | {t.formerly for t in TAGS if t.formerly}
    outside = []
    for path, tree in _code().items():
        for text in _strings(tree):
            if not text.startswith("slipway.") or text in ("slipway.dev", "slipway.dev/"):
                continue
            if text in labels.NAMES or text in COST_METRICS or _is_module(text):
                continue
            family = any(t.family and text.startswith(tuple(n for n in (t.name, t.formerly) if n)) for t in TAGS)
            if text in tag_names or family or not text.startswith("slipway.dev/"):
                outside.append(f"{path.relative_to(PACKAGE)}: {text}")
    assert outside == []


def test_every_tag_of_the_table_is_used_by_the_code() -> None:
    imported = set()
    for tree in _code().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in (
                "slipway.mlflow.tags",
                "slipway.mlflow.programtags",
            ):
                imported |= {alias.name for alias in node.names}
    assert sorted(set(_tag_variables()) - imported) == []
