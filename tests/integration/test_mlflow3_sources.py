"""Models logged by MLflow's own client (MLflow 3, the package the test server runs) as ModelArtifact
sources, registered against the real server: an MLflow 2-style run artifact, a LoggedModel by run id,
``runs:/<run>/model``, ``models:/m-<id>``, and a run with no model, which is never Validated.

MLflow's client runs in its own virtualenv (``.cache/mlflow-venv``: its pins conflict with the
Kubernetes client's), in a subprocess; its download of each registered version is the oracle of
the version's files, and coreutils' ``sha256sum`` the oracle of Slipway's digest."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from slipway.mlflow import MlflowClient, model_version_filter
from slipway.mlflow import sources as source_files
from slipway_testing import ROOT, apply_object, condition, model_artifact, phase_in, report, stalled_with, wait_status
from slipway_testing.mlflowscripts import LOG

pytestmark = pytest.mark.cluster

MLFLOW_PYTHON = ROOT / ".cache" / "mlflow-venv" / "bin" / "python"


READ = """
import json, subprocess, sys
import mlflow, mlflow.pyfunc
mlflow.set_tracking_uri(sys.argv[1])
out = {}
for uri, dest in json.loads(sys.argv[2]).items():
    local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=dest)
    prediction = mlflow.pyfunc.load_model(uri).predict([[0.0], [3.0]])
    out[uri] = {"dir": local, "prediction": [int(p) for p in prediction]}
print(json.dumps(out))
"""


def mlflow_client(script: str, *args: str) -> dict[str, Any]:
    """Run ``script`` with MLflow's own client; its last line of output, as JSON."""
    if not MLFLOW_PYTHON.exists():
        pytest.fail(f"{MLFLOW_PYTHON.relative_to(ROOT)} is missing: run `make mlflow-env`")
    done = subprocess.run([str(MLFLOW_PYTHON), "-c", script, *args], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def sha256sum_tree(directory: Path) -> tuple[str, int]:
    """coreutils' digest of every file under ``directory`` (the formula of slipway.mlflow.sources), and
    their count; MLflow's download adds ``registered_model_meta``, which is not one of the model's files."""
    (directory / "registered_model_meta").unlink(missing_ok=True)
    shell = "find . -type f | cut -c3- | LC_ALL=C sort | tr '\\n' '\\0' | xargs -0 sha256sum | sha256sum"
    digest = subprocess.run(["sh", "-c", shell], cwd=directory, capture_output=True, text=True, check=True)
    return "sha256:" + digest.stdout.split()[0], sum(1 for p in directory.rglob("*") if p.is_file())


def test_models_logged_by_mlflows_own_client_are_registered_with_their_files_or_stalled(
    kube_api, namespace, operator, mlflow: MlflowClient, cluster, tmp_path, monkeypatch
):
    logged = mlflow_client(LOG, cluster.mlflow_url, f"mlflow3-sources-{namespace}")
    run2, run3, empty, model_id = logged["run_artifact"], logged["logged"], logged["empty"], logged["model_id"]
    assert mlflow.list_artifacts(f"runs:/{run3}") == []  # MLflow 3 left the run's artifacts empty
    assert mlflow.has_files(f"runs:/{run3}/model") is False and mlflow.has_files(f"models:/{model_id}") is True
    one = mlflow.file_tree(f"runs:/{run2}/model/MLmodel")  # a path naming one file: that file
    mlflow.download_artifacts(f"runs:/{run2}/model/MLmodel", tmp_path / "one")
    assert (one.files, one.digest) == (1, sha256sum_tree(tmp_path / "one")[0]) and one.size_bytes > 0
    with monkeypatch.context() as patched:  # past the bounds: counted and sized, not read
        patched.setattr(source_files, "MAX_DIGEST_FILES", 2)
        big = mlflow.file_tree(f"models:/{model_id}")
    assert big.digest is None and big.files == 3 and big.size_bytes > 0
    operator()
    model = f"mlflow3-{namespace}"
    sources: dict[str, tuple[dict[str, Any], str]] = {  # name -> (source, the version source expected)
        "run-artifact": ({"mlflowRun": {"runId": run2, "artifactPath": "model"}}, f"runs:/{run2}/model"),
        "logged-by-run": ({"mlflowRun": {"runId": run3, "artifactPath": "model"}}, f"models:/{model_id}"),
        "runs-uri": ({"uri": f"runs:/{run3}/model"}, f"models:/{model_id}"),
        "models-uri": ({"uri": f"models:/{model_id}"}, f"models:/{model_id}"),
    }
    for name, (source, _) in sources.items():
        apply_object(kube_api, namespace, model_artifact(name, model, source, quantization={"method": "none"}))
    for name in ("no-model", "no-logged-model"):
        source = {"mlflowRun": {"runId": empty, "artifactPath": "model"}} if name == "no-model" else {
            "uri": "models:/m-00000000000000000000000000000000"}  # fmt: skip
        apply_object(kube_api, namespace, model_artifact(name, f"{model}-{name}", source, aliases=["candidate"]))

    rows, versions = [], {}
    for name, (_, expected) in sources.items():
        obj = wait_status(kube_api, namespace, "ModelArtifact", name, phase_in("Validated", "Failed"), 120, name)
        status = obj["status"]
        [version] = mlflow.search_model_versions(
            model_version_filter(model, {"slipway.dev/uid": obj["metadata"]["uid"]})
        )
        assert status["phase"] == "Validated", status
        assert version.source == expected, (name, version.source)
        assert version.run_id == (run2 if name == "run-artifact" else run3), name
        versions[name] = (version, status)
    # Registered with the model_id field: MLflow links the LoggedModel to a version (the last one registered).
    links = json.loads(mlflow.get_logged_model(model_id).tags["mlflow.modelVersions"])
    ours = {(model, v.version) for name, (v, _) in versions.items() if name != "run-artifact"}
    assert links and {(link["name"], str(link["version"])) for link in links} <= ours, links
    # MLflow's own client reads every registered version, and loads it as the model it is.
    wanted = {v.uri: str(tmp_path / name) for name, (v, _) in versions.items()}
    read = mlflow_client(READ, cluster.mlflow_url, json.dumps(wanted))
    for name, (version, status) in versions.items():
        digest, files = sha256sum_tree(Path(read[version.uri]["dir"]))
        assert read[version.uri]["prediction"] == [0, 1], name
        assert status.get("digest") == digest == version.tags["slipway.dev/source-digest"], name
        assert version.tags["slipway.dev/source-files"] == str(files) and files >= 4, name
        assert status["sizeBytes"] == int(version.tags["slipway.dev/source-size-bytes"]) > 0, name
        rows.append((name, status["phase"], version.source, digest, f"{files} ({status['sizeBytes']} bytes)"))

    stalls = (("no-model", "EmptySource", f"LoggedModel named 'model' whose source run is {empty}"),
              ("no-logged-model", "ModelNotFound", "LoggedModel m-00000000000000000000000000000000"))  # fmt: skip
    for name, reason, words in stalls:
        obj = wait_status(kube_api, namespace, "ModelArtifact", name, stalled_with(reason), 60, f"{name} stalled")
        message = condition(obj, "Stalled")["message"]
        assert message.startswith("spec.source.") and words in message, message
        assert obj["status"]["phase"] == "Registering" and condition(obj, "Validated")["status"] == "False"
        assert not (obj["status"].get("modelVersion") or obj["status"].get("digest"))
        rows.append((name, f"Stalled {reason}, phase Registering", "-", "-", "-"))
        assert mlflow.search_model_versions(f"name='{model}-{name}'") == []  # nothing registered, no alias moved
    assert len(mlflow.search_model_versions(f"name='{model}'")) == len(sources)

    report("source | outcome | version source | digest | files")
    for row in rows:
        report(" | ".join(str(c) for c in row))


def test_another_teams_logged_model_is_refused_by_its_experiment(
    kube_api, namespace, operator, mlflow: MlflowClient, cluster, monkeypatch
):
    acme = f"acme-{namespace}"  # team acme's experiment, with a model MLflow 3's client logged in it
    logged = mlflow_client(LOG, cluster.mlflow_url, acme)
    own = f"t2-{namespace}"
    allow = lambda patterns: client.CoreV1Api(kube_api).patch_namespace(  # noqa: E731
        namespace, {"metadata": {"annotations": {"slipway.dev/allowed-models": patterns}}}
    )
    allow(f"{own}-*")
    monkeypatch.setenv("SLIPWAY_REQUIRE_MODEL_ALLOWLIST", "true")
    operator()
    attacks = {  # name -> (source, words the refusal holds)
        "logged-model": ({"uri": f"models:/{logged['model_id']}"}, f"experiment '{acme}'"),
        "logged-by-run": ({"mlflowRun": {"runId": logged["logged"], "artifactPath": "model"}}, f"experiment '{acme}'"),
        "runs-uri": ({"uri": f"runs:/{logged['logged']}/model"}, f"experiment '{acme}'"),
        "unknown": ({"uri": "models:/m-00000000000000000000000000000000"}, "not one MLflow knows"),
    }
    for name, (source, _) in attacks.items():
        apply_object(kube_api, namespace, model_artifact(name, f"{own}-{name}", source))
    for name, (_, words) in attacks.items():
        obj = wait_status(kube_api, namespace, "ModelArtifact", name, stalled_with("SourceNotAllowed"), 60, name)
        message = condition(obj, "Stalled")["message"]
        field = "spec.source.uri" if "uri" in attacks[name][0] else "spec.source.mlflowRun.runId"
        assert message.startswith(f"{field}:") and words in message, message
    for name in attacks:
        assert mlflow.search_model_versions(f"name='{own}-{name}'") == []
    # The guard is what refused: once the admin shares acme's experiment, the LoggedModel is registered.
    allow(f"{own}-*, {acme}")
    registered = lambda o: bool((o.get("status") or {}).get("modelVersion"))  # noqa: E731
    wait_status(kube_api, namespace, "ModelArtifact", "logged-model", registered, 90, "registered once allowed")
    [version] = mlflow.search_model_versions(f"name='{own}-logged-model'")
    assert version.source == f"models:/{logged['model_id']}"


ONNX_AS_LOGGED_MODEL = """
import json, sys
import mlflow
mlflow.set_tracking_uri(sys.argv[1]); mlflow.set_experiment(sys.argv[2])
with mlflow.start_run() as run:  # MLflow 3's LoggedModel API: the files in the LoggedModel, none in the run
    model = mlflow.initialize_logged_model(name="model", source_run_id=run.info.run_id)
    mlflow.MlflowClient().log_model_artifacts(model.model_id, sys.argv[3])
    mlflow.finalize_logged_model(model.model_id, "READY")
print(json.dumps({"run": run.info.run_id, "model_id": model.model_id}))
"""


def test_a_logged_model_holding_an_onnx_model_is_quantized_validated_and_aliased(
    kube_api, namespace, operator, mlflow: MlflowClient, cluster, trained, tmp_path
):
    files = mlflow.download_artifacts(f"runs:/{trained}/model", tmp_path)  # the reference trainer's ONNX model
    logged = mlflow_client(ONNX_AS_LOGGED_MODEL, cluster.mlflow_url, f"mlflow3-onnx-{namespace}", str(files))
    operator()
    model = f"mlflow3-onnx-{namespace}"
    source = {"mlflowRun": {"runId": logged["run"], "artifactPath": "model"}}
    spec = {"quantization": {"method": "int8-dynamic"}, "validation": {"gates": [{"metric": "accuracy", "min": 0.8}]}}
    apply_object(kube_api, namespace, model_artifact("onnx", model, source, aliases=["candidate"], **spec))
    obj = wait_status(kube_api, namespace, "ModelArtifact", "onnx", phase_in("Validated", "Rejected", "Failed"), 300,
                      "a decision")  # fmt: skip
    status = obj["status"]
    assert status["phase"] == "Validated", status
    source_version = mlflow.get_model_version(model, status["modelVersion"])
    assert source_version.source == f"models:/{logged['model_id']}"
    assert source_version.tags["slipway.dev/source-files"] == str(sum(1 for p in files.rglob("*") if p.is_file()))
    quantized = mlflow.get_version_by_alias(model, "candidate")
    assert quantized is not None and quantized.version == status["quantizedVersion"] != source_version.version
    report(f"LoggedModel {logged['model_id']}: version {source_version.version} ({source_version.source}), "
           f"quantized version {quantized.version}, {status['phase']}, gates {status.get('gates')}")  # fmt: skip
