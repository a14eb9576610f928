"""The API reference of each kind: every field of its spec and status, from the CRD schema that
``slipway.crdgen`` makes of the pydantic models (so the page says what the API server enforces:
types, defaults, bounds, patterns, enums and CEL rules, with the models' field descriptions)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from slipway import API_VERSION, crdgen
from slipway.reference.common import GENERATED, escape

KINDS = crdgen.KINDS
Schema = dict[str, Any]


def _type(node: Schema) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = node.get("type", "object")
    if kind == "array":
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    return str(kind)


def _limits(node: Schema) -> str:
    """What the schema bounds, in a few words: enum, range, length, count, pattern."""
    out = []
    if "enum" in node:
        out.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None:
        out.append(f"{'>' if node.get('exclusiveMinimum') else '≥'} {low}")
    if high is not None:
        out.append(f"{'<' if node.get('exclusiveMaximum') else '≤'} {high}")
    for low_key, high_key, what in (
        ("minLength", "maxLength", "length"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "entries"),
    ):
        low_n, high_n = node.get(low_key), node.get(high_key)
        if low_n is not None and high_n is not None:
            out.append(f"{what} {low_n}..{high_n}")
        elif low_n is not None or high_n is not None:
            out.append(f"{what} ≥ {low_n}" if low_n is not None else f"{what} ≤ {high_n}")
    if "pattern" in node:
        out.append(f"pattern `{node['pattern']}`")
    return "; ".join(out)


def _cell(text: str) -> str:
    return escape(text)


def _code(value: Any) -> str:
    return f"`{json.dumps(value)}`" if value is not None else ""


def fields(node: Schema, path: str, required: bool = False) -> Iterator[tuple[str, Schema, bool]]:
    """(path, schema, required) of ``node`` and every field under it, depth first, in schema order."""
    yield path, node, required
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        yield from _children(node["items"], f"{path}[]")
    elif isinstance(node.get("additionalProperties"), dict):
        yield from _children(node["additionalProperties"], f"{path}.<key>")
    else:
        yield from _children(node, path)


def _children(node: Schema, path: str) -> Iterator[tuple[str, Schema, bool]]:
    needed = set(node.get("required", ()))
    for name, child in (node.get("properties") or {}).items():
        yield from fields(child, f"{path}.{name}", name in needed)


def _table(root: Schema, top: str) -> list[str]:
    lines = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for path, node, required in list(fields(root, top))[1:]:
        name = f"`{path}`" + (" (required)" if required else "")
        lines.append(
            f"| {name} | {_type(node)} | {_code(node.get('default'))} | {_cell(_limits(node))} | "
            f"{_cell(node.get('description', ''))} |"
        )
    return lines


def _rules(root: Schema, top: str) -> list[str]:
    lines = []
    for path, node, _ in fields(root, top):
        for rule in node.get("x-kubernetes-validations", ()):
            where = path.lstrip(".") or "the object"
            lines.append(f"- `{where}`: {_cell(rule.get('message') or rule['rule'])}")
    return lines


def markdown(kind: crdgen.Kind) -> str:
    """The reference page of one kind."""
    version = crdgen.crd(kind)["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    spec, status = schema["properties"]["spec"], schema["properties"]["status"]
    printed = version["additionalPrinterColumns"]
    columns = ", ".join(c["name"] for c in printed if not c.get("priority"))
    wide = ", ".join(c["name"] for c in printed if c.get("priority"))
    lines = [
        f"# {kind.kind}",
        "",
        GENERATED.format(source=f"operator/{kind.spec.__module__.replace('.', '/')}.py (through slipway.crdgen)"),
        "",
        f"`apiVersion: {API_VERSION}`, `kind: {kind.kind}`, short name `{kind.short_name}`, plural "
        f"`{kind.plural}`, category `slipway`. {kind.description}",
        "",
        f"`kubectl get {kind.short_name}` shows {columns}; `-o wide` adds {wide}. "
        f"`kubectl explain {kind.kind.lower()}.spec` describes the same fields.",
        "",
        "## spec",
        "",
        _cell(spec.get("description", "")),
        "",
        *_table(spec, "spec"),
    ]
    rules = _rules(schema, "")
    if rules:
        lines += [
            "",
            "### Rules checked at admission",
            "",
            "Besides the bounds above, the API server refuses:",
            "",
            *rules,
        ]
    lines += [
        "",
        "## status",
        "",
        _cell(status.get("description", "")),
        "",
        "Written by the operator alone (the status subresource).",
        "",
        *_table(status, "status"),
    ]
    return "\n".join(lines) + "\n"
