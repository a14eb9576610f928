"""make lock, make lock-mlflow: a lock file of exact versions, each with the sha256 of every file the package
index serves for it, installed in pip's hash-checking mode (make install, make mlflow-env, images/wheels.sh).

    lock.py OUT -- PIP_INSTALL_ARGS   a fresh resolve: PIP_INSTALL_ARGS installed into a scratch virtualenv
                                      (.cache/lock/env), frozen with pip and setuptools, then hashed
    lock.py OUT --pins                the pins OUT names already, hashed again (no version moves)

The hashes come from pip-tools' pip-compile --generate-hashes (pinned below, in a virtualenv of its own,
.cache/lock/tools) over the frozen pins: the index's sha256 of every wheel and sdist of each version, so
the lock installs on any platform the versions support. OUT keeps its leading comment lines. A lock whose
pins differ from what was frozen (pip-compile resolving something else) is refused.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".cache" / "lock"
PIP_TOOLS = "pip-tools==7.7.0"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``name==version`` lines of a requirements or lock file (continuations and hashes skipped)."""
    return {normal(m[1]): m[2] for line in text.splitlines() if (m := PIN.match(line.strip()))}


def scratch_env(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(path)
    return path / "bin" / "pip"


def pip(pip_bin: Path, *args: str) -> str:
    return subprocess.run([str(pip_bin), *args], check=True, stdout=subprocess.PIPE, text=True).stdout


def frozen(install_args: list[str]) -> str:
    """What PIP_INSTALL_ARGS install in a fresh virtualenv with the newest pip: every package, pip and
    setuptools included, the project's own editable ones left out."""
    env = scratch_env(WORK / "env")
    pip(env, "install", "-q", "--upgrade", "pip")
    pip(env, "install", "-q", *install_args)
    pinned = pip(env, "freeze", "--all", "--exclude-editable")
    shutil.rmtree(WORK / "env")  # a gigabyte, needed no more
    return pinned


def hashed(pinned: str) -> str:
    """pip-compile --generate-hashes over exact pins: the same pins, each with its files' hashes."""
    tools = WORK / "tools"
    if not (tools / "bin" / "pip-compile").exists():
        pip(scratch_env(tools), "install", "-q", PIP_TOOLS)
    src, out = WORK / "pins.in", WORK / "pins.txt"
    src.write_text(pinned)
    out.unlink(missing_ok=True)
    subprocess.run([str(tools / "bin" / "pip-compile"), "-q", "--generate-hashes", "--allow-unsafe", "--strip-extras",
                    "--no-annotate", "--no-header", "--no-emit-index-url", "--no-emit-find-links",
                    "--no-emit-trusted-host", "--no-emit-options", "--rebuild", "-o", str(out), str(src)],
                   check=True, cwd=WORK)  # fmt: skip
    return "".join(line + "\n" for line in out.read_text().splitlines() if line.strip() and not line.startswith("#"))


def lock(out: Path, install_args: list[str] | None) -> None:
    old = out.read_text() if out.exists() else ""
    WORK.mkdir(parents=True, exist_ok=True)
    pinned = frozen(install_args) if install_args is not None else "".join(f"{n}=={v}\n" for n, v in pins(old).items())
    text = hashed(pinned)
    if pins(text) != pins(pinned):
        moved = sorted(set(pins(text).items()) ^ set(pins(pinned).items()))
        raise SystemExit(f"lock.py: pip-compile's pins differ from the frozen ones: {moved}")
    entries = re.split(r"\n(?=\S)", text.strip())  # a pin and its indented --hash lines
    missing = [entry.split()[0] for entry in entries if "--hash=sha256:" not in entry]
    if missing:
        raise SystemExit(f"lock.py: no hashes for {missing}")
    header = "".join(line + "\n" for line in old.splitlines() if line.startswith("#")) if old else ""
    out.write_text(header + text)
    print(f"lock.py: {out}: {len(pins(text))} packages, {text.count('--hash=')} hashes")


def main() -> None:
    args = sys.argv[1:]
    if len(args) == 2 and args[1] == "--pins":
        lock(Path(args[0]).resolve(), None)
    elif len(args) >= 3 and args[1] == "--":
        lock(Path(args[0]).resolve(), args[2:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
