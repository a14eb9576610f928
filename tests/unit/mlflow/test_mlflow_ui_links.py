"""The links to MLflow's UI that status shows: the routes of MLflow 3's UI (a single-page app behind
``#``), ``#/experiments/<experiment>/runs/<run>``, ``#/runs/<run>`` and
``#/models/<name>/versions/<version>``, with names encoded as the UI encodes them."""

from __future__ import annotations

import pytest

from slipway.mlflow import MlflowClient
from slipway.mlflow.uris import ui_run_url, ui_version_url


@pytest.mark.parametrize(
    ("ui", "experiment", "expected"),
    [
        ("https://ml.example.com", "3", "https://ml.example.com/#/experiments/3/runs/r1"),
        ("https://ml.example.com/", "3", "https://ml.example.com/#/experiments/3/runs/r1"),
        ("https://ml.example.com/mlflow", "3", "https://ml.example.com/mlflow/#/experiments/3/runs/r1"),
        ("https://ml.example.com", "", "https://ml.example.com/#/runs/r1"),  # the UI looks the experiment up
    ],
)
def test_a_runs_page(ui: str, experiment: str, expected: str) -> None:
    assert ui_run_url(ui, "r1", experiment) == expected


@pytest.mark.parametrize(
    ("name", "version", "expected"),
    [
        ("digits", "4", "http://mlflow:5000/#/models/digits/versions/4"),
        ("digits", 12, "http://mlflow:5000/#/models/digits/versions/12"),
        ("team a/clf", "1", "http://mlflow:5000/#/models/team%20a%2Fclf/versions/1"),  # encodeURIComponent
        ("m(1)!~*'.-_", "2", "http://mlflow:5000/#/models/m(1)!~*'.-_/versions/2"),  # left as the UI leaves them
    ],
)
def test_a_model_versions_page(name: str, version: str | int, expected: str) -> None:
    assert ui_version_url("http://mlflow:5000", name, version) == expected


def test_the_clients_run_link_has_no_credentials() -> None:
    client = MlflowClient("http://user:secret@mlflow:5000")
    assert client.run_url("3", "r1") == "http://mlflow:5000/#/experiments/3/runs/r1"
