"""The single-file plugin (release/plugin.py, `make plugin`): it holds slipway.cli and the pure modules
it imports, nothing else, runs under an isolated Python with no package installed, is built the same
twice, and its krew archive and manifest agree with it."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from slipway import __version__
from slipway_testing.release import ROOT, load

plugin = load("plugin")
PACKAGE = ROOT / "operator" / "slipway"


def test_the_plugin_imports_the_standard_library_and_slipway_only():
    modules, foreign = plugin.closure(PACKAGE)
    assert foreign == set()
    assert {"slipway.cli.main", "slipway.cli.client", "slipway.cli.cache", "slipway.kinds"} <= set(modules)
    # None of the operator's pydantic models, clients or handlers.
    assert not [m for m in modules if m.endswith(".model") or m.startswith(("slipway.kube", "slipway.mlflow"))]


def test_a_module_importing_a_dependency_fails_the_build(tmp_path: Path):
    package = tmp_path / "slipway"
    (package / "cli").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cli" / "__init__.py").write_text("")
    (package / "cli" / "main.py").write_text(
        "from typing import TYPE_CHECKING\nimport json\nfrom slipway.cli import helper\n"
        "if TYPE_CHECKING:\n    import kubernetes\n"
    )
    (package / "cli" / "helper.py").write_text("def f():\n    return 1\nimport pydantic.fields\n")
    modules, foreign = plugin.closure(package)
    assert set(modules) == {"slipway", "slipway.cli", "slipway.cli.main", "slipway.cli.helper"}
    assert foreign == {"pydantic"}  # kubernetes is imported for the type checker only
    with pytest.raises(SystemExit, match=r"imports \['pydantic'\] at run time"):
        plugin.zipapp_bytes(package)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    plugin.build(ROOT, __version__, out)
    return out


def test_the_build_is_reproducible(built: Path, tmp_path: Path):
    plugin.build(ROOT, __version__, tmp_path)
    for name in (plugin.ZIPAPP, plugin.ARCHIVE, plugin.MANIFEST):
        assert (tmp_path / name).read_bytes() == (built / name).read_bytes(), name


def test_the_zipapp_holds_the_closure_and_a_main(built: Path):
    zipapp = built / plugin.ZIPAPP
    assert zipapp.read_bytes().startswith(b"#!/usr/bin/env python3\n") and os.access(zipapp, os.X_OK)
    names = set(zipfile.ZipFile(zipapp).namelist())
    modules, _ = plugin.closure(PACKAGE)
    assert names == {"__main__.py"} | {str(p.relative_to(PACKAGE.parent)) for p in modules.values()}


def isolated(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The zipapp under ``python -I -S``: no site-packages, no PYTHONPATH, nothing but the standard library."""
    return subprocess.run([sys.executable, "-I", "-S", *args], capture_output=True, text=True, timeout=60, env=env)


def test_the_zipapp_runs_with_nothing_installed(built: Path, tmp_path: Path):
    zipapp = str(built / plugin.ZIPAPP)
    done = isolated(zipapp, "--help")
    assert done.returncode == 0 and "history" in done.stdout and "completion" in done.stdout, done.stderr
    done = isolated(zipapp, "version", "--client")
    assert (done.returncode, done.stdout) == (0, f"plugin: {__version__}\n"), done.stderr
    done = isolated(zipapp, "completion", "bash")
    assert done.returncode == 0 and "complete -F _kubectl_slipway kubectl-slipway" in done.stdout
    # No cluster: the version of the plugin, and why the operator's is unknown.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    done = isolated(zipapp, "version", env=env)
    assert done.returncode == 1 and done.stdout == f"plugin: {__version__}\n"
    assert done.stderr == (
        f"error: operator: unknown; no kubeconfig at {tmp_path / 'none'}: set KUBECONFIG or --kubeconfig "
        "(and --context)\n"
    )


def test_the_krew_archive_and_manifest(built: Path):
    archive = (built / plugin.ARCHIVE).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.mode, member.mtime) == ("kubectl-slipway", 0o755, 0)
        extracted = tar.extractfile(member)
        assert extracted is not None and extracted.read() == (built / plugin.ZIPAPP).read_bytes()
    manifest = yaml.safe_load((built / plugin.MANIFEST).read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "slipway"
    assert manifest["spec"]["version"] == f"v{__version__}"
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive).hexdigest()
    assert platform["uri"].endswith(f"/v{__version__}/{plugin.ARCHIVE}")
    assert platform["bin"] == "kubectl-slipway" and platform["files"] == [{"from": "kubectl-slipway", "to": "."}]
