"""The release tools (release/versioning.py, release/bundle.py) as modules, for the tests: they are
scripts of the repository, not part of the package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    """``release/<name>.py`` imported once (its siblings importable by name, as when it runs)."""
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(ROOT / "release"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "release" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
