"""MLflow credentials reach pods only by Secret reference; the address pods get carries none."""

from __future__ import annotations

import json

from slipway.builders import trainingrun
from slipway.builders.common import with_credentials
from slipway.config import OperatorConfig
from slipway.models import TrainingRunSpec


def test_pods_get_the_address_without_credentials_and_the_secret_by_reference():
    config = OperatorConfig(mlflow_url="https://user:s3cret@mlflow.example/?token=abc", prometheus_url=None)
    assert config.pod_mlflow_url is not None and "s3cret" not in config.pod_mlflow_url
    assert "abc" not in config.pod_mlflow_url
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    link = config.pod_mlflow_url
    job = with_credentials(trainingrun.job("r", "ns", spec, link), config.mlflow_credentials_secret)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "slipway-mlflow-credentials", "optional": True}}]
    assert "s3cret" not in json.dumps(job)


def test_no_secret_configured_adds_nothing():
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    job = trainingrun.job("r", "ns", spec, None)
    assert "envFrom" not in with_credentials(job, "")["spec"]["template"]["spec"]["containers"][0]
