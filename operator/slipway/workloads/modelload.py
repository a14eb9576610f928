"""The reference server's model: found in MLflow (or fetched before the start), downloaded and
loaded into ONNX Runtime in the background, with the fault switches it carries."""

from __future__ import annotations

import argparse
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slipway.mlflow import MlflowClient, ModelVersion, parse_model_uri
from slipway.workloads.common import (
    INPUT_NAME,
    MODEL_FILE,
    ConfigError,
    WorkloadExit,
    download_model,
    env_str,
    mlflow_client,
    onnx_session,
    read_metadata,
)
from slipway.workloads.faults import crash_if_asked, resolve_faults

if TYPE_CHECKING:
    from slipway.workloads.servehttp import PredictionServer

log = logging.getLogger("slipway.workloads.serve")  # the server's one logger


class LoadedModel:
    """An ONNX model in an ONNX Runtime session, with the version it is served as."""

    def __init__(self, model_file: Path, version: str, uri: str, threads: int, name: str = "model") -> None:
        self.version = version
        self.uri = uri
        self.name = name
        self.session = onnx_session(model_file, threads)

    def predict(self, instances: Any) -> tuple[list[int], list[list[float]]]:
        labels, probabilities = self.session.run(["label", "probabilities"], {INPUT_NAME: instances})
        return [int(x) for x in labels.reshape(-1)], probabilities.astype(float).round(6).tolist()


def registry_version(client: MlflowClient, uri: str) -> ModelVersion | None:
    """The registered model version a ``models:/name/version`` or ``models:/name@alias`` URI
    names, with its tags; None for other URIs and for an alias that does not exist."""
    model = parse_model_uri(uri)
    if model is None:
        return None
    if model.alias is not None:
        return client.get_version_by_alias(model.name, model.alias)
    number = model.registered_version
    return client.get_model_version(model.name, number) if number is not None else None


def model_version_label(uri: str, version: ModelVersion | None = None) -> str:
    """``$SLIPWAY_MODEL_VERSION``, else the registered ``version`` served, else the version a
    ``models:/name/version`` URI names, else "unknown"."""
    explicit = env_str("SLIPWAY_MODEL_VERSION")
    if explicit:
        return explicit
    if version is not None:
        return version.version
    model = parse_model_uri(uri)
    return (model.registered_version if model else None) or "unknown"


def local_model() -> Path | None:
    """The model file fetched before the server started (``SLIPWAY_MODEL_PATH``, spec.modelLoad), if any."""
    path = env_str("SLIPWAY_MODEL_PATH")
    if not path:
        return None
    model_file = Path(path) / MODEL_FILE
    if not model_file.is_file():
        raise ConfigError(f"SLIPWAY_MODEL_PATH={path} holds no {MODEL_FILE}: did the fetch-model init container run?")
    log.info("serving the files fetched into %s", path)
    return model_file


def load_in_background(server: PredictionServer, args: argparse.Namespace, workdir: Path) -> threading.Thread:
    """Download and load the model, and settle the fault switches it carries, while /healthz
    already answers; stop the server if it fails (or a fault switch says to crash)."""

    def load() -> None:
        try:
            client = mlflow_client()
            version = registry_version(client, args.model_uri)
            # An alias is resolved once: the files, the fault tags and the version label are of one version.
            named = parse_model_uri(args.model_uri)
            source = version.uri if version is not None and named and named.alias is not None else args.model_uri
            model_file = local_model() or download_model(client, source, workdir)
            faults = resolve_faults(
                os.environ, version.tags if version else {}, read_metadata(model_file).get("faults")
            )
            log.info("fault switches: %s", faults.describe())
            crash_if_asked(faults)
            named_model = env_str("SLIPWAY_MODEL_NAME") or (named.name if named else "model")
            model = LoadedModel(
                model_file, model_version_label(args.model_uri, version), args.model_uri, args.threads, named_model
            )
            if faults.load_seconds:
                log.info("fault switch loadSeconds: loading %.0f s more", faults.load_seconds)
                if server.stopping.wait(faults.load_seconds):  # told to stop while "loading": no model
                    return
            server.faults = faults  # before the model: no request is served without them
            server.serve_model(model)
            log.info("serving %s (version %s) on %s:%d", args.model_uri, model.version, args.host, args.port)
        except WorkloadExit as exc:
            server.load_error = exc
            server.stop()
        except BaseException as exc:
            log.error("cannot load %s: %s", args.model_uri, exc)
            server.load_error = exc
            server.stop()

    thread = threading.Thread(target=load, name="model-loader", daemon=True)
    thread.start()
    return thread
