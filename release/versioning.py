"""Slipway's version, from one source: the nearest git tag `vX.Y.Z` (0.1.0 until the first tag).

The files that carry it are stamped from that source, never edited by hand:

    python release/versioning.py             # print the version (the nearest tag's, or 0.1.0)
    python release/versioning.py --stamp X   # stamp X into every file below (a release commit)
    python release/versioning.py --check     # exit 1, naming each file that disagrees

Stamped: the Python package's `slipway/_version.py` (pyproject.toml reads it), the chart's
`version` and `appVersion`, and the image tags in manifests/. Checked, not stamped: the docs and
samples that name a version (an image tag, an archive's name). A release of a version newer than the
nearest tag is being prepared: its commit stamps the files, and the tag `vX.Y.Z` names that commit.
`make release VERSION=X` of another version stamps a copy of the sources, never the tree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INITIAL = "0.1.0"
SEMVER = r"\d+\.\d+\.\d+"
# The files stamped from the source: (path, a pattern whose one group is the version).
STAMPED: list[tuple[str, str]] = [
    ("operator/slipway/_version.py", rf'^__version__ = "({SEMVER})"$'),
    ("charts/slipway/Chart.yaml", rf"^version: ({SEMVER})$"),
    ("charts/slipway/Chart.yaml", rf'^appVersion: "({SEMVER})"$'),
    ("charts/slipway-crds/Chart.yaml", rf"^version: ({SEMVER})$"),
    ("charts/slipway-crds/Chart.yaml", rf'^appVersion: "({SEMVER})"$'),
    ("manifests/deployment.yaml", rf"ghcr\.io/slipway-dev/slipway-(?:operator|workloads):({SEMVER})\b"),
]
# Files that name the version in prose or examples: checked to agree, not stamped.
CHECKED_GLOBS = ["README.md", "docs/**/*.md", "samples/*.yaml", "e2e/kind/run.sh", "bench/harness.py"]
CHECKED_PATTERNS = [
    rf"ghcr\.io/slipway-dev/slipway[\w-]*:({SEMVER})\b",
    rf"slipway-(?:operator|workloads)-({SEMVER})\.oci\.tar",
    rf"slipway_operator-({SEMVER})-py3",
    rf"dist/({SEMVER})/kubectl-slipway",  # the single-file plugin's install lines
]


def parse(version: str) -> tuple[int, int, int]:
    if not re.fullmatch(SEMVER, version):
        raise ValueError(f"version {version!r} is not MAJOR.MINOR.PATCH (e.g. 0.2.0; the tag is v0.2.0)")
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


def tags(root: Path = ROOT) -> list[str]:
    """The versions of the tags `vX.Y.Z` reachable from HEAD, newest first; [] outside a git checkout."""
    try:
        done = subprocess.run(["git", "-C", str(root), "tag", "--merged", "HEAD", "--list", "v*"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    except FileNotFoundError:
        return []
    found = [t[1:] for t in done.stdout.split() if re.fullmatch(rf"v{SEMVER}", t)] if done.returncode == 0 else []
    return sorted(found, key=parse, reverse=True)


def source(root: Path = ROOT) -> str:
    """The version: the newest tag `vX.Y.Z` reachable from HEAD, or 0.1.0 before the first tag."""
    found = tags(root)
    return found[0] if found else INITIAL


def stamped(root: Path = ROOT) -> str:
    """The version the tree carries (slipway/_version.py, which the package and its wheel read)."""
    path, pattern = STAMPED[0]
    match = re.search(pattern, (root / path).read_text(), re.MULTILINE)
    if not match:
        raise ValueError(f'{path}: no line __version__ = "X.Y.Z"; run `make version VERSION=X.Y.Z`')
    return match.group(1)


def stamp(version: str, root: Path = ROOT) -> list[str]:
    """Write `version` into every stamped file under root; return the files changed."""
    parse(version)
    changed = []
    for path in dict.fromkeys(p for p, _ in STAMPED):
        text = (root / path).read_text()
        new = text
        for pattern in (pat for p, pat in STAMPED if p == path):
            new, count = re.subn(pattern, lambda m: m.group(0).replace(m.group(1), version), new, flags=re.MULTILINE)
            if count == 0:
                raise ValueError(f"{path}: nothing matches {pattern}: the file no longer names its version there")
        if new != text:
            (root / path).write_text(new)
            changed.append(path)
    return changed


def disagreements(version: str, root: Path = ROOT) -> list[str]:
    """Every place under root that names a version other than `version`, as 'file:line: found X'."""
    found = []
    stamped_paths = dict.fromkeys(p for p, _ in STAMPED)
    checked = sorted({p for g in CHECKED_GLOBS for p in root.glob(g) if "_build" not in p.parts})
    places = [(root / p, [pat for q, pat in STAMPED if q == p]) for p in stamped_paths]
    places += [(p, CHECKED_PATTERNS) for p in checked]
    for path, patterns in places:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for pattern in patterns:
                for match in re.finditer(pattern, line):
                    if match.group(1) != version:
                        found.append(f"{path.relative_to(root)}:{number}: {match.group(1)}, not {version}")
    return found


def check(root: Path = ROOT) -> list[str]:
    """What disagrees with the source: the tree's version against the tags, then each file against it."""
    tree, src = stamped(root), source(root)
    problems = []
    if parse(tree) < parse(src):
        problems.append(f"operator/slipway/_version.py says {tree}, but the tag v{src} is newer: "
                        f"run `make version VERSION={src}` and commit")  # fmt: skip
    return problems + disagreements(tree, root)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--stamp"] and len(argv) == 2:
        changed = stamp(argv[1])
        print(f"version {argv[1]}: stamped {', '.join(changed) or 'nothing (already there)'}")
        return 0
    if argv == ["--check"]:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    print(source())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
