"""MLflow credentials reach pods only by Secret reference; the address pods get carries none."""

from __future__ import annotations

import json

import pytest

from slipway.config import OperatorConfig
from slipway.podspec import with_credentials
from slipway.training import build as trainingrun
from slipway.training.model import TrainingRunSpec


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


def test_a_password_holding_a_slash_is_refused_at_start_without_being_quoted():
    with pytest.raises(ValueError) as refused:
        OperatorConfig(mlflow_url="http://slipway:s3cr/et#1?x@mlflow:5000", prometheus_url=None)
    message = str(refused.value)
    assert message.startswith("--mlflow-url 'http://***@mlflow:5000': its user info holds '/'")
    assert "percent-encode" in message and "s3cr" not in message and "et#1" not in message
    encoded = OperatorConfig(mlflow_url="http://slipway:s3cr%2Fet%231%3Fx@mlflow:5000", prometheus_url=None)
    assert encoded.pod_mlflow_url == "http://mlflow:5000"
