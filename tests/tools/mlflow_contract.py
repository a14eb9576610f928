"""The MLflow contract tests against each MLflow release Slipway supports, without a cluster: for each
release, its own ``mlflow server`` (from its virtualenv) and its own client run
tests/integration/test_mlflow_client.py and test_mlflow_contract.py.

    python tests/tools/mlflow_contract.py            # the oldest and the newest (make test-mlflow-contract)
    python tests/tools/mlflow_contract.py oldest     # one of them (make test runs the oldest: the
                                                     # shared cluster phase runs the newest)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))

from localkube.mlflow_server import start_mlflow  # noqa: E402

RELEASES = {  # name -> the release's virtualenv (Makefile: mlflow-oldest-env, mlflow-env)
    "oldest": ROOT / ".cache" / "mlflow-venv-oldest",
    "newest": ROOT / ".cache" / "mlflow-venv",
}
PATHS = ["tests/integration/test_mlflow_client.py", "tests/integration/test_mlflow_contract.py"]


@contextlib.contextmanager
def release_env(name: str) -> Iterator[dict[str, str]]:
    """The environment of a pytest run against release ``name``: its server started (and stopped
    afterwards) in a temporary directory, and its client's Python."""
    venv = RELEASES[name]
    with tempfile.TemporaryDirectory(prefix=f"slipway-mlflow-{name}-") as workdir:
        server = start_mlflow(Path(workdir), mlflow_bin=venv / "bin" / "mlflow")
        try:
            yield {**os.environ, "SLIPWAY_TEST_MLFLOW_URL": server.url,
                   "SLIPWAY_TEST_MLFLOW_PYTHON": str(venv / "bin" / "python")}  # fmt: skip
        finally:
            server.stop()


def main(names: list[str]) -> int:
    code = 0
    for name in names or list(RELEASES):
        with release_env(name) as env:
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-s", *PATHS]
            print(f"\nMLflow contract tests against the {name} release ({RELEASES[name].name})", flush=True)
            code = max(code, subprocess.call(cmd, cwd=ROOT, env=env))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
