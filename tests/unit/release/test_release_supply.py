"""The supply chain of a release without building one: make release refuses a working tree with changes
(release/supply.py) before it builds anything, unless told it is a development build; the signatures a
team verifies accept the release key's and refuse a changed file, another key and another namespace; and
every pin of the lock files carries the hashes make install and make image check, and pip, run as they run
it, refuses a wheel whose bytes differ from the hashed one; the base is made again past its refresh period."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from slipway_testing.release import ROOT, load

supply = load("supply")
bundle = load("bundle")
lock = load("lock")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                   check=True, capture_output=True)  # fmt: skip


class Started(Exception):
    """The release got past its refusals and started to build."""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / ".gitignore").write_text("dist/\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "release")
    return tmp_path


def test_a_clean_tree_is_released_and_ignored_output_does_not_make_it_dirty(repo):
    (repo / "dist").mkdir()
    (repo / "dist" / "slipway-operator-0.1.0.oci.tar").write_bytes(b"x")
    assert supply.dirty(repo) == []
    supply.require_clean(repo)


@pytest.mark.parametrize("change", ["modified", "untracked", "staged"])
def test_release_refuses_a_dirty_tree_before_it_builds_anything(repo, monkeypatch, change, capsys):
    if change == "modified":
        (repo / "pyproject.toml").write_text("[project]\nname = 'changed'\n")
    elif change == "untracked":
        (repo / "notes.txt").write_text("x")
    else:
        (repo / "new.py").write_text("x")
        git(repo, "add", "new.py")
    built = []

    def stage(version: str) -> None:  # the first step of the build: stopped here, nothing is built
        built.append(version)
        raise Started

    monkeypatch.setattr(bundle, "ROOT", repo)
    monkeypatch.setattr(bundle, "stage", stage)
    monkeypatch.setattr(supply, "require_syft", lambda: None)
    with pytest.raises(supply.Refused) as refused:
        bundle.release("0.1.0", bundle.DEFAULT_REGISTRY)
    message = str(refused.value)
    assert "uncommitted changes" in message and "--allow-dirty" in message and "ALLOW_DIRTY=1" in message
    assert ("pyproject.toml" if change == "modified" else "notes.txt" if change == "untracked" else "new.py") in message
    assert built == []  # refused before the first step
    # The development override lets it through (and says so); the build then starts.
    with pytest.raises(Started):
        bundle.release("0.1.0", bundle.DEFAULT_REGISTRY, allow_dirty=True)
    assert built == ["0.1.0"]
    assert "uncommitted changes (--allow-dirty)" in capsys.readouterr().out


def test_release_refuses_a_directory_that_is_not_a_checkout(tmp_path):
    with pytest.raises(supply.Refused, match="cannot tell whether .* is clean"):
        supply.require_clean(tmp_path)


def test_release_wants_a_key_or_says_it_is_unsigned(tmp_path):
    with pytest.raises(supply.Refused, match="no signing key.*SIGNING_KEY=PATH.*UNSIGNED=1"):
        supply.require_key(None, unsigned=False)
    with pytest.raises(supply.Refused, match="no such file"):
        supply.require_key(tmp_path / "missing", unsigned=False)
    supply.require_key(None, unsigned=True)


def test_make_release_passes_the_overrides_and_the_key():
    def dry(*args: str) -> str:
        done = subprocess.run(["make", "-n", "-o", ".venv/.installed", "-o", "helm", "-o", "syft", "release", *args],
                              cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
        lines = done.stdout.replace("\\\n", " ").splitlines()  # the recipe's continued lines joined
        return next(line for line in lines if "release/bundle.py" in line)

    plain = dry()
    assert "--allow-dirty" not in plain and "--unsigned" not in plain and "--signing-key" not in plain
    assert "--allow-dirty" in dry("ALLOW_DIRTY=1") and "--unsigned" in dry("UNSIGNED=1")
    assert "--signing-key /keys/release" in dry("SIGNING_KEY=/keys/release")


def keygen(path: Path) -> tuple[Path, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path, path.with_name(path.name + ".pub").read_text()


def test_signatures_accept_the_release_key_and_refuse_forgeries(tmp_path):
    key, public = keygen(tmp_path / "release")
    other, _ = keygen(tmp_path / "attacker")
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("0" * 64 + "  slipway-operator-0.1.0.oci.tar\n")
    assert supply.sign(key, sums) == tmp_path / "SHA256SUMS.sig"
    ok, said = supply.verify(public, sums)
    assert ok, said
    refused = 0
    sums.write_text("1" * 64 + "  slipway-operator-0.1.0.oci.tar\n")  # changed after signing
    refused += not supply.verify(public, sums)[0]
    supply.sign(other, sums)  # signed again by another key
    refused += not supply.verify(public, sums)[0]
    sums.with_name("SHA256SUMS.sig").unlink()
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", "file", str(sums)], check=True,
                   capture_output=True)  # fmt: skip
    refused += not supply.verify(public, sums)[0]  # the release key, another namespace
    assert refused == 3
    assert not list(tmp_path.glob(".allowed_signers-*"))  # verify leaves nothing behind


@pytest.mark.parametrize("name", ["constraints.txt", "e2e/constraints-mlflow.txt", "e2e/constraints-mlflow-oldest.txt"])
def test_every_pin_of_the_lock_files_carries_its_hashes(name):
    text = (ROOT / name).read_text()
    entries = [e for e in lock.re.split(r"\n(?=\S)", text.strip()) if not e.startswith("#")]
    assert len(entries) == len(lock.pins(text)) > 10
    unhashed = [e.split()[0] for e in entries if not lock.re.search(r"--hash=sha256:[0-9a-f]{64}", e)]
    assert not unhashed, f"{name}: pins without a hash: {unhashed}"
    if name == "constraints.txt":  # make install pins the installer and the editable installs' backend too
        assert {"pip", "setuptools"} <= set(lock.pins(text))


def test_make_install_and_the_images_install_in_hash_checking_mode():
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes --only-binary :all: --no-deps -r constraints.txt" in makefile
    assert "--require-hashes --only-binary :all: --no-deps -r e2e/constraints-mlflow.txt" in makefile
    assert "--require-hashes --only-binary :all: --no-deps -r e2e/constraints-mlflow-oldest.txt" in makefile
    assert "--require-hashes" in (ROOT / "images" / "wheels.sh").read_text()
    assert "--require-hashes" in (ROOT / "images" / "Dockerfile").read_text()


def test_the_base_is_made_again_when_it_is_older_than_the_refresh_period(tmp_path):
    """images/base-pick.sh, which images/build.sh asks for the base to reuse: the newest of this base.sh made
    within BASE_REFRESH_DAYS, else none (made again, with Debian's security updates of the day)."""
    now = time.time()
    ages = {"base-abc-20261120.tar": 17, "base-abc-20261205.tar": 2, "base-other-20261207.tar": 0,
            "base-abc-20261207.partial.tar": 0}  # fmt: skip
    for name, days in ages.items():
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (now - days * 86400 - 60, now - days * 86400 - 60))

    def pick(days: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(ROOT / "images" / "base-pick.sh"), str(tmp_path), "abc", days],
                              capture_output=True, text=True)  # fmt: skip

    assert pick("7").stdout.strip() == str(tmp_path / "base-abc-20261205.tar")
    assert pick("30").stdout.strip() == str(tmp_path / "base-abc-20261205.tar")  # the newest of two
    assert pick("1").stdout.strip() == ""  # two days old: made again
    assert pick("0").stdout.strip() == ""  # BASE_REFRESH_DAYS=0: now
    bad = pick("weekly")
    assert bad.returncode == 2 and "BASE_REFRESH_DAYS=weekly is not a number of days" in bad.stderr
    base = (ROOT / "images" / "base.sh").read_text()
    assert "bookworm-security main" in base and "dpkg-query" in base  # security updates, and the list recorded


def tiny_wheel(folder: Path, payload: bytes) -> Path:
    """A one-module wheel, ``tiny-1.0``, with ``payload`` as its module: what a package index would serve."""
    wheel = folder / "tiny-1.0-py3-none-any.whl"
    files = {
        "tiny.py": payload,
        "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
        "tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("tiny-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in [*files, "tiny-1.0.dist-info/RECORD"]))
    return wheel


def test_an_index_serving_other_bytes_than_the_lock_hashed_is_refused(tmp_path):
    """pip's hash-checking mode as make install (-r with --require-hashes) and images/wheels.sh (hashed
    constraints, ranges in the requirements) use it: the wheel the lock hashed installs; the same name and
    version with other bytes (a compromised index or mirror) is refused, both ways."""
    index = tmp_path / "index"
    index.mkdir()
    genuine = hashlib.sha256(tiny_wheel(index, b"GOOD = True\n").read_bytes()).hexdigest()
    (tmp_path / "lock.txt").write_text(f"tiny==1.0 \\\n    --hash=sha256:{genuine}\n")
    (tmp_path / "wanted.in").write_text("tiny>=1\n")
    env = {**os.environ, "PIP_FIND_LINKS": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def install(how: str, target: str) -> subprocess.CompletedProcess[str]:
        args = ["-r", str(tmp_path / "lock.txt"), "--require-hashes", "--no-deps"] if how == "install" else [
            "-c", str(tmp_path / "lock.txt"), "-r", str(tmp_path / "wanted.in"), "--require-hashes"]  # fmt: skip
        return subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-cache-dir", "--no-index",
                               "--find-links", str(index), "--only-binary", ":all:", "--target",
                               str(tmp_path / target), *args], capture_output=True, text=True, env=env)  # fmt: skip

    assert install("install", "a").returncode == 0 and install("constraints", "b").returncode == 0
    assert (tmp_path / "a" / "tiny.py").read_text() == "GOOD = True\n"
    tiny_wheel(index, b"import os; os.system('steal')\n")  # the index now serves other bytes for tiny 1.0
    refused = 0
    for how in ("install", "constraints"):
        done = install(how, f"{how}-forged")
        assert done.returncode != 0 and "DO NOT MATCH THE HASHES" in done.stderr, done.stderr
        assert not (tmp_path / f"{how}-forged" / "tiny.py").exists()
        refused += 1
    assert refused == 2
