"""Serving pods check every file against the digest the operator recorded when it registered the
version: the verify function (one digest for the operator and the pods, coreutils' ``sha256sum``
its oracle), what fetch-model does with a mismatch (exit 2, a clear last log line, nothing left at
the destination), and how the digest travels from the ModelArtifact's status through the pod spec
(no part of the revision; a promotion keeps it)."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from slipway.inference import build
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.operatorfields import files_digest
from slipway.inference.rollout.base import Desired
from slipway.inference.rollout.tracks import desired_from_artifact
from slipway.mlflow import ModelVersion
from slipway.mlflow.digests import FILES_DIGEST_ENV, directory_digest
from slipway.workloads import fetch as fetching
from slipway.workloads.common import EXIT_CONFIG, ConfigError

OTHER = "sha256:" + "0" * 64


def model_dir(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "model.onnx").write_bytes(b"\x08\x01weights")
    (root / "slipway-model.json").write_text('{"faults": {}}')
    (root / "sub" / "tokenizer.json").write_text("{}")
    return root


def sha256sum(directory: Path) -> str:
    shell = "find . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum"
    return "sha256:" + subprocess.run(["sh", "-c", shell], cwd=directory, capture_output=True, text=True,
                                      check=True).stdout.split()[0]  # fmt: skip


def test_the_pods_digest_is_the_operators_and_sha256sums(tmp_path: Path) -> None:
    root = model_dir(tmp_path / "m")
    digest, count = directory_digest(root)
    assert (digest, count) == (sha256sum(root), 3)
    assert fetching.verify_files(root, digest) == digest
    (root / fetching.RECEIPT).write_text("{}")  # the receipt fetch writes beside the files is not counted
    assert directory_digest(root, leave_out=[fetching.RECEIPT]) == (digest, 3)
    assert directory_digest(root / "model.onnx")[0] != digest  # one file: under its own name


@pytest.mark.parametrize("change", ["bytes", "added", "removed", "renamed", "metadata"])
def test_any_change_to_any_file_is_a_mismatch_naming_both_digests(tmp_path: Path, change: str) -> None:
    root = model_dir(tmp_path / "m")
    validated = directory_digest(root)[0]
    if change == "bytes":
        (root / "model.onnx").write_bytes(b"\x08\x01weightz")
    elif change == "added":
        (root / "sub" / "extra.py").write_text("import os")
    elif change == "removed":
        (root / "sub" / "tokenizer.json").unlink()
    elif change == "renamed":
        (root / "sub" / "tokenizer.json").rename(root / "sub" / "tokenizer2.json")
    else:
        (root / "slipway-model.json").write_text('{"faults": {"latency_ms": 500}}')  # not the model file
    with pytest.raises(ConfigError) as refused:
        fetching.verify_files(root, validated, "from the pod spec")
    message = str(refused.value)
    assert message.startswith("digest mismatch:") and validated in message and sha256sum(root) in message
    assert "from the pod spec" in message and "not started" in message


@pytest.mark.parametrize(
    ("files_tag", "file_tag"),
    [("slipway.dev/source-digest", "slipway.dev/digest"), ("slipway.source.digest", "slipway.digest")],
    ids=["tags", "tags-as-earlier-versions-named-them"],
)
def test_the_expected_digest_comes_from_the_pod_spec_before_mlflow(
    monkeypatch: pytest.MonkeyPatch, files_tag: str, file_tag: str
) -> None:
    tagged = ModelVersion.from_json({"name": "m", "version": "3", "source": "runs:/r/model",
                                     "tags": [{"key": files_tag, "value": OTHER},
                                              {"key": file_tag, "value": "sha256:" + "1" * 64}]})  # fmt: skip
    mine = "sha256:" + "a" * 64
    monkeypatch.setenv(FILES_DIGEST_ENV, mine)
    assert fetching.Expected.of(tagged) == fetching.Expected(mine, "from the pod spec")
    monkeypatch.setenv(FILES_DIGEST_ENV, "sha256:abc")
    with pytest.raises(ConfigError, match=f"{FILES_DIGEST_ENV} is 'sha256:abc', not sha256:<64 hex digits>"):
        fetching.Expected.of(tagged)
    monkeypatch.delenv(FILES_DIGEST_ENV)
    assert fetching.Expected.of(tagged) == fetching.Expected(OTHER, f"from MLflow tag {files_tag}")  # MLflow's word
    file_digest = {"key": file_tag, "value": "sha256:" + "1" * 64}
    model_file_only = ModelVersion.from_json({"name": "m", "version": "3", "source": "s", "tags": [file_digest]})
    assert fetching.Expected.of(model_file_only) == fetching.Expected(model_file="sha256:" + "1" * 64)
    untagged = ModelVersion.from_json({"name": "m", "version": "4", "source": "runs:/r/model"})
    assert fetching.Expected.of(untagged) == fetching.Expected()


class FakeMlflow:
    """download_artifacts from a local directory; one registered version."""

    def __init__(self, store: Path) -> None:
        self.store = store

    def get_model_version(self, name: str, version: str) -> ModelVersion:
        return ModelVersion.from_json({"name": name, "version": version, "source": "runs:/r/model"})

    def download_artifacts(self, uri: str, dest: Path) -> Path:
        return Path(shutil.copytree(self.store, Path(dest) / "model"))


def test_fetch_refuses_files_changed_after_validation_exit_2_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = model_dir(tmp_path / "store")
    validated = directory_digest(store)[0]
    monkeypatch.setattr(fetching, "mlflow_client", lambda: FakeMlflow(store))
    dest = tmp_path / "current"
    argv = ["--model-uri", "models:/digits/3", "--dest", str(dest)]
    monkeypatch.setenv(FILES_DIGEST_ENV, validated)
    assert fetching.main(argv) == 0
    assert directory_digest(dest, leave_out=[fetching.RECEIPT]) == (validated, 3)
    (store / "model.onnx").write_bytes(b"re-uploaded after validation")
    with caplog.at_level(logging.INFO):
        assert fetching.main(argv) == EXIT_CONFIG
    last = caplog.records[-1].getMessage()
    assert "digest mismatch" in last and validated in last and last.endswith("the server is not started")
    assert list(dest.iterdir()) == []  # the server finds nothing to load


def test_the_digest_travels_from_the_artifact_status_into_fetch_model_only() -> None:
    digest = "sha256:" + "b" * 64
    status = {"phase": "Validated", "modelVersion": "3", "filesDigest": digest}
    desired, _ = desired_from_artifact({"spec": {"model": {"name": "digits"}}, "status": status}, "ns", "digits")
    assert desired is not None and desired.digest == digest
    forged = {"spec": {"model": {"name": "digits"}}, "status": {**status, "filesDigest": "sha256:short"}}
    assert desired_from_artifact(forged, "ns", "digits")[0].digest == ""  # type: ignore[union-attr]
    env = [{"name": FILES_DIGEST_ENV, "value": OTHER}]
    spec = InferenceDeploymentSpec.model_validate(
        {"model": {"artifactRef": {"name": "digits"}}, "image": "s:1", "modelLoad": {}, "env": env}
    )

    def body(files: str) -> dict[str, Any]:
        return build.deployment("d", "ns", spec, "stable", "3", "models:/digits/3", None, 1, "digits", "w:1",
                                files_digest=files)  # fmt: skip

    with_digest, without = body(digest), body("")
    pod = with_digest["spec"]["template"]["spec"]
    fetch_env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    assert fetch_env[FILES_DIGEST_ENV] == digest  # the spec's own env cannot set it for fetch-model
    assert FILES_DIGEST_ENV not in {e["name"] for e in without["spec"]["template"]["spec"]["initContainers"][0]["env"]}
    labels = [b["spec"]["template"]["metadata"]["labels"][build.REVISION_LABEL] for b in (with_digest, without)]
    assert labels[0] == labels[1]  # the version is in the revision; its digest adds nothing to canary


def test_a_promotion_keeps_the_digest_the_canary_had() -> None:
    digest = "sha256:" + "c" * 64
    resolved = Desired("4", "models:/digits/4", "digits", "rev4", digest)
    assert files_digest(resolved, {}, []) == digest
    from_track = Desired("4", "models:/digits/4", "digits", "rev4")  # as a track's Deployment describes it
    assert files_digest(from_track, {"rev4": digest}, []) == digest
    canary = {"spec": {"template": {"metadata": {"labels": {build.REVISION_LABEL: "rev4"}},
                                    "spec": {"initContainers": [{"name": "fetch-model", "env": [
                                        {"name": FILES_DIGEST_ENV, "value": digest}]}]}}}}  # fmt: skip
    assert files_digest(from_track, {}, [None, canary]) == digest
    assert files_digest(Desired("3", "models:/digits/3", "digits", "rev3"), {}, [canary]) == ""
