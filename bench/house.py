"""The house's figures, from the code's syntax trees: modules, floors (layers), imports that climb a
floor, package cycles, the largest module and function, kind names in the frame, ``# fmt: skip`` lines.

    python bench/house.py [ROOT]    # ROOT: a checkout (default: this one)

The layers, the units and the cycle finder are the ones ``tests/unit/test_layers.py`` enforces.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _layers(root: Path):  # the layer test of the checkout measured, pointed at its own tree
    path = root / "tests" / "unit" / "test_layers.py"
    if not path.exists():
        path = next((root / "tests" / "unit").rglob("test_layers.py"))
    spec = importlib.util.spec_from_file_location("measured_layers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ROOT = root / "operator" / "slipway"
    return module


def figures(root: Path) -> dict[str, object]:
    layers = _layers(root)
    modules = layers._modules()
    edges = layers._edges()
    climbing = sum(
        len(places)
        for source, targets in edges.items()
        for imported, places in targets.items()
        if layers._layer_of(imported) > layers._layer_of(source)
    )
    largest_module = max(((p.read_text().count("\n"), n) for n, p in modules.items() if not n.endswith(".model")))
    functions = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append(((node.end_lineno or node.lineno) - node.lineno + 1, f"{name}.{node.name}"))
    # the frame's kind names as this checkout's layer test counts them, in the tree measured
    here = _layers(HERE)
    here.ROOT = root / "operator" / "slipway"
    return {
        "modules": len(modules),
        "floors": len(layers.LAYERS),
        "imports climbing a floor": climbing,
        "package cycles": len(layers._cycles(edges)),
        "largest module (lines, API models aside)": largest_module,
        "largest function (lines)": max(functions),
        "functions over 60 lines": sum(1 for n, _ in functions if n > 60),
        "modules over 360 lines": sum(
            1 for n, p in modules.items() if p.read_text().count("\n") > 360 and not n.endswith(".model")
        ),
        "kind names in the frame": len(here.kind_names_in_frame()),
        "'# fmt: skip' in product code": sum(p.read_text().count("# fmt: skip") for p in modules.values()),
    }


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) > 1 else HERE
    for name, value in figures(root).items():
        print(f"{name:45} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
