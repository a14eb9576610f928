"""The kubectl plugin as one file, installable without a package index: `make plugin` (and `make release`)
write into dist/X.Y.Z/:

    kubectl-slipway.pyz      the plugin: a zipapp (python3 >= 3.11 runs it; kubectl on PATH does its requests)
    kubectl-slipway.tar.gz   that zipapp as `kubectl-slipway`, for krew
    plugin.yaml              a krew manifest for the archive, with its sha256

The zipapp holds slipway.cli and the modules it imports at run time, found by reading their imports
(the package's own modules only: a module importing anything outside the standard library and
slipway fails the build), so none of the operator's dependencies. Both archives are reproducible:
fixed timestamps and order, so the same sources give the same sha256.

Install (no krew): install -D -m 0755 dist/X.Y.Z/kubectl-slipway.pyz ~/.local/bin/kubectl-slipway
With krew:         kubectl krew install --manifest=dist/X.Y.Z/plugin.yaml --archive=dist/X.Y.Z/kubectl-slipway.tar.gz
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import io
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "slipway.cli.main"
ZIPAPP = "kubectl-slipway.pyz"
ARCHIVE = "kubectl-slipway.tar.gz"
MANIFEST = "plugin.yaml"
INTERPRETER = "/usr/bin/env python3"
MIN_PYTHON = (3, 11)
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
RELEASES = "https://github.com/slipway-dev/slipway/releases/download"
MAIN = f'''"""kubectl-slipway: the kubectl plugin of Slipway, as one file (release/plugin.py)."""
import sys

if sys.version_info < {MIN_PYTHON}:
    sys.exit("kubectl-slipway needs Python {".".join(map(str, MIN_PYTHON))} or newer, not " + sys.version.split()[0])
from {ENTRY} import main

main()
'''


def _runtime_imports(tree: ast.Module) -> set[str]:
    """The modules a module imports when it runs (not under ``if TYPE_CHECKING:``)."""
    typing_only = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for node in ast.walk(branch)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return found


def _path_of(module: str, package_root: Path) -> Path | None:
    """The file of a module of the package under ``package_root`` (its parent holds ``slipway/``)."""
    base = package_root.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _parse(path: Path, attempts: int = 3) -> ast.Module:
    """``ast.parse`` of ``path``. CPython 3.11's ast module counts its recursion depth in state shared
    by every thread: an AST built in another thread of the process at the same moment makes
    ``compile`` raise "SystemError: AST constructor recursion depth mismatch"
    for a file it would parse. Parsed again, it parses."""
    for _ in range(attempts - 1):
        try:
            return ast.parse(path.read_text(), str(path))
        except SystemError:
            continue
    return ast.parse(path.read_text(), str(path))


def closure(package_root: Path, entry: str = ENTRY) -> tuple[dict[str, Path], set[str]]:
    """The package's modules ``entry`` needs at run time (with the packages above each), and the
    top-level names of every other module they import that is not in the standard library."""
    top = package_root.name
    modules: dict[str, Path] = {}
    foreign: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in modules:
            continue
        path = _path_of(name, package_root)
        if path is None:
            continue  # `from pkg import symbol`: a symbol, not a module
        modules[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages above it run first
        for imported in _runtime_imports(_parse(path)):
            first = imported.split(".")[0]
            if first == top:
                todo.append(imported)
            elif first not in sys.stdlib_module_names and first != "__future__":
                foreign.add(first)
    return modules, foreign


def zipapp_bytes(package_root: Path) -> bytes:
    """The zipapp: a ``#!`` line, then a zip of __main__.py and the modules, in a fixed order and time."""
    modules, foreign = closure(package_root)
    if foreign:
        raise SystemExit(
            f"plugin: {ENTRY} imports {sorted(foreign)} at run time: the single-file plugin holds the standard "
            "library and slipway only; import those lazily (or not at all) in slipway.cli"
        )
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w", zipfile.ZIP_DEFLATED) as archive:
        entries = {"__main__.py": MAIN.encode()}
        for path in modules.values():
            entries[path.relative_to(package_root.parent).as_posix()] = path.read_bytes()
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[name])
    return f"#!{INTERPRETER}\n".encode() + body.getvalue()


def tarball_bytes(zipapp: bytes) -> bytes:
    """A tar.gz holding the zipapp as ``kubectl-slipway`` (mode 0755), as krew installs it."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("kubectl-slipway")
        info.size, info.mode, info.mtime = len(zipapp), 0o755, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(zipapp))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def krew_manifest(version: str, sha256: str) -> str:
    """The krew manifest of the archive (``kubectl krew install --manifest=... --archive=...`` installs
    from dist/; the uri is where a published release would serve it)."""
    return f"""apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: slipway
spec:
  version: v{version}
  homepage: https://github.com/slipway-dev/slipway
  shortDescription: See and steer Slipway's TrainingRuns, ModelArtifacts and InferenceDeployments
  description: |
    kubectl slipway shows a Slipway lifecycle (TrainingRun -> ModelArtifact -> InferenceDeployment)
    as a tree, lists the three kinds, shows what an InferenceDeployment served and rolled back,
    steers its canary (promote, abort, retry, pause, resume) and waits for any of them.
  caveats: |
    kubectl slipway runs on python3 ({".".join(map(str, MIN_PYTHON))} or newer) and makes its API
    requests through kubectl: both must be on PATH.
  platforms:
    - selector:
        matchExpressions:
          - key: os
            operator: In
            values: [linux, darwin]
      uri: {RELEASES}/v{version}/{ARCHIVE}
      sha256: {sha256}
      files:
        - from: kubectl-slipway
          to: .
      bin: kubectl-slipway
"""


def build(src: Path, version: str, out: Path) -> list[Path]:
    """The zipapp, its krew archive and manifest in ``out``, from the sources under ``src``."""
    out.mkdir(parents=True, exist_ok=True)
    zipapp = zipapp_bytes(src / "operator" / "slipway")
    tarball = tarball_bytes(zipapp)
    written = [out / ZIPAPP, out / ARCHIVE, out / MANIFEST]
    written[0].write_bytes(zipapp)
    written[0].chmod(0o755)
    written[1].write_bytes(tarball)
    written[2].write_text(krew_manifest(version, hashlib.sha256(tarball).hexdigest()))
    return written


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import versioning

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", nargs="?", default=versioning.stamped(), help="X.Y.Z (default: the tree's)")
    args = parser.parse_args()
    versioning.parse(args.version)
    if versioning.stamped(ROOT) != args.version:
        raise SystemExit(
            f"plugin: the tree is {versioning.stamped(ROOT)}, not {args.version}: `make release VERSION="
            f"{args.version}` builds a release of another version (stamped into a copy of the sources)"
        )
    for path in build(ROOT, args.version, ROOT / "dist" / args.version):
        print(f"plugin: {path.relative_to(ROOT)}  {path.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
