"""What a built image holds, checked file by file (a step of make image: a failure fails the build).

    python images/check.py KIND ROOT WHEEL [--list OUT]

ROOT is the image's root filesystem (buildah mount), KIND ``operator`` or ``workloads``, WHEEL the
slipway-operator wheel the image was built from. The image must hold:
- Slipway's package exactly as the wheel has it (the same files, none more);
- exactly the distributions of its pinned requirements (build/image/KIND/deps/requirements.txt)
  and slipway-operator; for the operator, none of the workloads extra;
- nothing of the local test cluster or the tests: no ``localkube``, ``slipway_e2e`` or
  ``slipway_testing`` anywhere, no top-level ``tests`` or ``conftest.py`` in site-packages (the
  wheel's own file list is tests/unit/release/test_wheel.py's); no pytest, no hypothesis;
- no installer in the virtualenv (pip, setuptools).
``--list OUT`` writes every path of the image, one a line.
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from pathlib import Path

VENV = "opt/slipway"
TEST_CLUSTER = {"localkube", "slipway_e2e", "slipway_testing", "slipway_testing.py"}
NEVER = {"pytest", "_pytest", "hypothesis", "pip", "setuptools", "tests", "conftest.py"}
WORKLOADS_ONLY = {"sklearn", "onnx", "onnxruntime", "skl2onnx", "numpy", "scipy"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def site_packages(root: Path) -> Path:
    found = sorted((root / VENV / "lib").glob("python3*/site-packages"))
    if len(found) != 1:
        raise SystemExit(f"check: expected one site-packages under /{VENV}/lib, found {found}")
    return found[0]


def problems(kind: str, root: Path, wheel: Path) -> list[str]:
    site = site_packages(root)
    out: list[str] = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if rel.parts[0] in {"proc", "sys", "dev"}:
            continue
        if TEST_CLUSTER & set(rel.parts):
            out.append(f"/{rel}: the test cluster or test code is in the image")
    top = {p.name for p in site.iterdir()}
    out += [f"{site.relative_to(root)}/{name}: must not ship" for name in sorted(top & NEVER)]
    if kind == "operator":
        out += [f"{site.relative_to(root)}/{name}: the workloads extra is not the operator's"
                for name in sorted(top & WORKLOADS_ONLY)]  # fmt: skip
    in_image = {str(p.relative_to(site)) for p in (site / "slipway").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}  # fmt: skip
    in_wheel = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("slipway/")}
    out += [f"slipway/{n}: in the image, not in the wheel" for n in sorted(in_image - in_wheel)]
    out += [f"slipway/{n}: in the wheel, not in the image" for n in sorted(in_wheel - in_image)]
    wanted = {canonical(line.split("==")[0]) for line in  # name==version --hash=sha256:...
              (wheel.parents[1] / "deps" / "requirements.txt").read_text().splitlines() if "==" in line}  # fmt: skip
    wanted |= {"slipway-operator"}
    installed = {canonical(p.name.split("-")[0]) for p in site.glob("*.dist-info")}
    out += [f"distribution {n}: installed but not pinned for the {kind} image" for n in sorted(installed - wanted)]
    out += [f"distribution {n}: pinned but not installed" for n in sorted(wanted - installed)]
    return out


def main() -> int:
    p = argparse.ArgumentParser(prog="images/check.py", description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=("operator", "workloads"))
    p.add_argument("root", type=Path)
    p.add_argument("wheel", type=Path)
    p.add_argument("--list", type=Path, help="write the image's paths here")
    args = p.parse_args()
    if args.list:
        paths = sorted("/" + str(q.relative_to(args.root)) for q in args.root.rglob("*"))
        args.list.write_text("\n".join(paths) + "\n")
    found = problems(args.kind, args.root, args.wheel)
    for line in found:
        print(f"check {args.kind}: {line}", file=sys.stderr)
    files = sum(1 for q in args.root.rglob("*") if q.is_file())
    print(f"check {args.kind}: {files} files, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
