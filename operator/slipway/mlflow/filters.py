"""Search filters in MLflow's SQL-like syntax, built safely.

Attributes (``name``, ``run_id``, ``source_path``, ``version_number``) and tags as
``tags.<key>`` (or ``tag.<key>``), with backticks around keys that contain dots or slashes,
values in single quotes, joined with ``and`` only, e.g.
``name='digits' and tags.`slipway.dev/uid`='1234'``. Tags support ``=``, ``!=``, ``LIKE``
and ``ILIKE``. The grammar cannot escape quotes or backticks: such values are refused.
"""

from __future__ import annotations

from collections.abc import Mapping


def model_version_filter(name: str, tags: Mapping[str, str] | None = None) -> str:
    """A ``search_model_versions`` filter: versions of ``name`` carrying all ``tags``.

    Raises ValueError for quotes or backticks, which MLflow's filter grammar cannot escape.
    """
    clauses = [f"name={_quote(name)}"]
    clauses += [f"{_tag(key)}={_quote(value)}" for key, value in (tags or {}).items()]
    return " and ".join(clauses)


def tag_filter(key: str, value: str) -> str:
    """A ``search_runs`` filter clause matching runs whose tag ``key`` equals ``value``."""
    return f"{_tag(key)} = {_quote(value)}"


def _tag(key: str) -> str:
    if "`" in key:
        raise ValueError(f"tag key {key!r} contains a backtick; MLflow filters cannot express it")
    return f"tags.`{key}`"


def _quote(value: str) -> str:
    if "'" in value:
        raise ValueError(f"value {value!r} contains a single quote; MLflow filters cannot express it")
    return f"'{value}'"


def logged_model_filter(name: str, source_run_id: str) -> str:
    """A ``search_logged_models`` filter: the logged models named ``name`` whose source run is
    ``source_run_id``. Raises ValueError for quotes, which the grammar cannot escape."""
    return f"name = {_quote(name)} AND source_run_id = {_quote(source_run_id)}"
