"""Reading a ModelArtifact's source in MLflow: a run's model, a LoggedModel or a URI, resolved as
MLflow's own client finds it, and in multi-tenant mode checked against the namespace's allow-list
(a run, a LoggedModel or an experiment is the namespace's to use only if its experiment is)."""

from __future__ import annotations

from slipway import mlflowcreds, tenancy
from slipway.artifact.model import ArtifactSource
from slipway.artifact.observed import NoFiles
from slipway.artifact.state import Source
from slipway.mlflow import MlflowClient, MlflowNotFound, Run, parse_model_uri, parse_run_uri
from slipway.mlflow.programtags import MODEL_DIGEST, MODEL_SIZE
from slipway.mlflow.sources import looked_for
from slipway.redact import redact_url
from slipway.tenancy import Policy, Use


class SourceReader:
    """The source's reads of one pass, under the namespace's allow-list ``policy``."""

    def __init__(self, client: MlflowClient, policy: Policy) -> None:
        self.mlflow, self.policy = client, policy

    def read(self, src: ArtifactSource, run_id: str | None) -> Source | NoFiles:
        """``src`` resolved; ``run_id``: the run of the TrainingRun it names (which succeeded)."""
        if src.uri is not None:
            with mlflowcreds.refusals_named("spec.source.uri"):
                self.check_uri(src.uri, "spec.source.uri")
                return self.uri_source(src.uri, "spec.source.uri")
        if src.mlflow_run is not None:
            run_id, path = src.mlflow_run.run_id, src.mlflow_run.artifact_path
            if self.policy.active:
                tenancy.uri_target(f"runs:/{run_id}/{path}", "spec.source.mlflowRun.artifactPath")
        else:
            assert src.training_run_ref is not None and run_id is not None
            path = "model"
        named = "spec.source.mlflowRun.runId" if src.mlflow_run else "spec.source.trainingRunRef"
        with mlflowcreds.refusals_named(named):
            run = self.mlflow.get_run(run_id)
        if self.policy.active and src.mlflow_run is not None:  # a TrainingRun's run is checked by its own spec
            self.check_run(run, "spec.source.mlflowRun.runId")
        field = "spec.source.mlflowRun" if src.mlflow_run is not None else "spec.source.trainingRunRef"
        return self.run_source(run, path, field)

    def run_source(self, run: Run, path: str, field: str) -> Source | NoFiles:
        """The run's model as MLflow's client finds it: its artifacts at ``path``, else its LoggedModel
        named ``path``; NoFiles when neither holds a file."""
        found = self.mlflow.run_model(run, path)
        if found is None:
            return NoFiles(field, looked_for(run.run_id, path))
        tags = run.tags if found.model_id is None else {}  # the trainer's tags describe its run artifacts
        return Source(
            found.uri,
            found.run_id,
            MODEL_DIGEST.read(tags),
            MODEL_SIZE.read(tags),
            model_id=found.model_id,
        )

    def uri_source(self, uri: str, field: str) -> Source | NoFiles:
        """``runs:/`` as a run's model; ``models:/m-<id>`` as that LoggedModel; any other URI as it is
        (one MLflow serves must hold a file)."""
        run_uri = parse_run_uri(uri)
        if run_uri is not None:
            return self.run_source(self.mlflow.get_run(run_uri.run_id), run_uri.path, field)
        model = parse_model_uri(uri)
        if model is not None and model.version is None and model.alias is None:
            try:
                logged = self.mlflow.get_logged_model(model.name)
            except MlflowNotFound:
                return NoFiles(field, f"LoggedModel {model.name}, which MLflow does not have", "ModelNotFound")
            found = self.mlflow.logged(logged)
            source = Source(found.uri, found.run_id, model_id=found.model_id)
        else:
            source = Source(uri, None)
        if self.mlflow.has_files(source.uri) is False:
            shown = f"LoggedModel {source.model_id}'s artifacts" if source.model_id else f"{redact_url(uri)!r}"
            return NoFiles(field, shown)
        return source

    def check_uri(self, uri: str, field: str) -> None:
        """A source URI is allowed only if what it reaches is: its model, its run's experiment, its
        experiment (tenancy.uri_target); nothing is checked in single-team mode."""
        policy = self.policy
        if not policy.active:
            return
        target = tenancy.uri_target(uri, field)
        if target.model is not None:
            policy.check([Use(field, "model", target.model)])
        if target.run_id is not None:
            self.check_run(self.mlflow.get_run(target.run_id), field)
        if target.experiment_id is not None:
            self.check_experiment(target.experiment_id, field, uri)
        if target.logged_model is not None:
            try:
                logged = self.mlflow.get_logged_model(target.logged_model)
            except MlflowNotFound:
                raise policy.source_refusal(
                    field,
                    f"LoggedModel {target.logged_model} is not one MLflow knows, so its experiment cannot be checked",
                ) from None
            self.check_experiment(logged.experiment_id, field, f"LoggedModel {logged.model_id}")

    def check_run(self, run: Run, field: str) -> None:
        """A run is the namespace's to use only if its experiment is."""
        self.check_experiment(run.experiment_id, field, f"run {run.run_id}")

    def check_experiment(self, experiment_id: str, field: str, what: str) -> None:
        policy = self.policy
        name = self.mlflow.experiment_name(experiment_id)
        if name is None or not policy.allows(name):
            shown = f"experiment {name!r}" if name is not None else "an experiment MLflow does not know"
            raise policy.source_refusal(
                field, f"{what} belongs to {shown} (id {experiment_id}), not one this namespace may use"
            )
