"""The program pages (docs/reference/programs/) state the contract the builders make: every variable
Slipway sets in a program's container is in its builder's table, and so on its page, and every
variable of a table is set for some spec; every exit code of the reference programs is on the pages."""

from __future__ import annotations

from typing import Any

import pytest

from slipway import podspec
from slipway.artifact import build as artifactbuild
from slipway.artifact.decide import decide
from slipway.artifact.decisions import CreateJob
from slipway.artifact.model import ModelArtifactSpec
from slipway.artifact.observed import QUANTIZE, QUANTIZED, SOURCE, VALIDATE, Observed, StepSeen
from slipway.artifact.state import Source
from slipway.inference import build as servebuild
from slipway.inference.model import InferenceDeploymentSpec
from slipway.mlflow import ModelVersion, RegisteredModel, Run
from slipway.reference import programparts, programs
from slipway.training import build as trainbuild
from slipway.training.model import TrainingRunSpec
from slipway.workloads import common as workloads

MLFLOW = "http://mlflow:5000"
USER_ENV = [{"name": "TEAM_SETTING", "value": "1"}]  # the spec's own: not Slipway's to document
TLS = podspec.PodTls("mlflow-ca", "mlflow-client", False)


def env_of(manifest: dict[str, Any], container: str) -> set[str]:
    """The variables Slipway sets in the containers named ``container`` of ``manifest``'s pods, MLflow's
    TLS variables aside (their own table) and the spec's own left out."""
    if manifest["kind"] == "JobSet":
        pods = [r["template"]["spec"]["template"]["spec"] for r in manifest["spec"]["replicatedJobs"]]
    else:
        pods = [manifest["spec"]["template"]["spec"]]
    names = {
        e["name"]
        for pod in pods
        for c in [*pod.get("initContainers", []), *pod["containers"]]
        if c["name"] == container
        for e in c.get("env", [])
    }
    return names - set(podspec.MLFLOW_TLS_ENV) - {e["name"] for e in USER_ENV}


def trainer_manifests() -> list[dict[str, Any]]:
    every = {"checkpoint": {"size": "1Gi"}, "nodes": 2, "env": USER_ENV}
    full = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", **every})
    plain = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    return [
        trainbuild.job("r", "ns", full, MLFLOW),
        trainbuild.jobset("r", "ns", full, MLFLOW),
        trainbuild.job("r", "ns", plain, MLFLOW),
    ]


def test_the_trainers_table_is_what_the_builder_sets() -> None:
    seen = set().union(*(env_of(m, trainbuild.CONTAINER) for m in trainer_manifests()))
    assert seen == set(trainbuild.TRAINER_ENV)


def step_job(step: str) -> dict[str, Any]:
    """The Job a ModelArtifact's pass creates for ``step``, as the decision builds it."""
    body = {
        "model": {"name": "m"},
        "source": {"mlflowRun": {"runId": "r1"}},
        "validation": {"gates": [{"metric": "accuracy", "min": 0.9}], "env": USER_ENV},
    }
    if step == QUANTIZE:
        body["quantization"] = {"method": "int8-dynamic"}
    spec = ModelArtifactSpec.model_validate(body)
    run = Run(f"{step}-run", "1", step, "RUNNING", "")
    versions: dict[str, ModelVersion | None] = {SOURCE: ModelVersion("m", "4", "runs:/r1/model", "r1")}
    if step == QUANTIZE:
        versions[QUANTIZED] = None
    seen = Observed("ns", "a", MLFLOW, "slipway/workloads:1", False, source=Source("runs:/r1/model", "r1"))
    seen.model, seen.versions, seen.steps = RegisteredModel("m"), versions, {step: StepSeen(run, None)}
    decision = decide(spec, {}, seen)
    assert isinstance(decision, CreateJob) and decision.step == step
    return decision.job


@pytest.mark.parametrize(
    ("step", "table"),
    [(QUANTIZE, artifactbuild.STEP_ENV | artifactbuild.QUANTIZE_ENV), (VALIDATE, artifactbuild.STEP_ENV)],
)
def test_a_steps_table_is_what_its_job_gets(step: str, table: dict[str, str]) -> None:
    assert env_of(step_job(step), step) == set(table)


def deployments() -> list[dict[str, Any]]:
    served = {"model": {"name": "m", "alias": "a"}, "image": "i", "env": USER_ENV}
    loaded = InferenceDeploymentSpec.model_validate(
        served | {"modelLoad": {"path": "/models/current", "cacheClaimName": "models"}}
    )
    plain = InferenceDeploymentSpec.model_validate(served)
    digest = "sha256:" + "a" * 64
    return [
        servebuild.deployment("d", "ns", spec, "canary", "3", "models:/m/3", MLFLOW, 1, files_digest=digest)
        for spec in (loaded, plain)
    ]


def test_the_servers_and_the_fetchers_tables_are_what_the_deployment_gets() -> None:
    built = deployments()
    assert set().union(*(env_of(d, "server") for d in built)) == set(servebuild.SERVER_ENV)
    assert env_of(built[0], "fetch-model") == set(servebuild.FETCH_ENV)


def test_mlflows_tls_variables_are_documented() -> None:
    """What podspec adds to the containers that talk to MLflow, with a CA, a client certificate or
    the insecure switch, is the TLS table of every page."""
    added = set()
    for tls in (TLS, podspec.PodTls(insecure=True)):
        for manifest in (*trainer_manifests(), step_job(VALIDATE), *deployments()):
            for _, containers in podspec.mlflow_containers(podspec.with_mlflow_tls(manifest, tls)):
                added |= {
                    e["name"] for c in containers for e in c.get("env", []) if e["name"] in podspec.MLFLOW_TLS_ENV
                }
    assert added == set(programparts.tls_env())


@pytest.mark.parametrize("page", sorted(programs.PAGES))
def test_each_page_shows_its_environment_and_every_exit_code(page: str) -> None:
    text = programs.PAGES[page]()
    table = {
        "trainer": trainbuild.TRAINER_ENV,
        "quantizer": artifactbuild.STEP_ENV | artifactbuild.QUANTIZE_ENV,
        "evaluator": artifactbuild.STEP_ENV,
        "server": servebuild.SERVER_ENV,
        "fetcher": servebuild.FETCH_ENV,
    }[page]
    assert [name for name in (*table, *programparts.tls_env()) if f"| `{name}` |" not in text] == []
    if page != "server":  # a server's exit only restarts it
        codes = {name: value for name, value in vars(workloads).items() if name.startswith("EXIT_")}
        assert [name for name, code in codes.items() if f"| {code} | `{name}` |" not in text] == []


def test_every_exit_code_has_a_meaning() -> None:
    assert [name for _, name, _ in programparts.exit_codes()] == [
        "EXIT_OK",
        "EXIT_ERROR",
        "EXIT_CONFIG",
        "EXIT_MLFLOW_UNAVAILABLE",
        "EXIT_TERMINATED",
    ]
