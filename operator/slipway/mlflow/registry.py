"""MLflow's model registry: registered models, their versions, version tags and aliases."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slipway.mlflow.errors import MlflowError, MlflowNotFound
from slipway.mlflow.http import MlflowHttp
from slipway.mlflow.uris import model_version_uri


@dataclass(frozen=True)
class RegisteredModel:
    """A registered model and its aliases (alias → version)."""

    name: str
    aliases: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RegisteredModel:
        return cls(
            name=data["name"],
            aliases={a["alias"]: str(a["version"]) for a in data.get("aliases", [])},
            tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
        )


@dataclass(frozen=True)
class ModelVersion:
    """One version of a registered model. ``version`` is a string, as MLflow returns it."""

    name: str
    version: str
    source: str
    run_id: str = ""
    status: str = ""
    creation_timestamp: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    model_id: str = ""  # the MLflow 3 logged model it was registered from

    @property
    def uri(self) -> str:
        """The registry URI of this version, ``models:/<name>/<version>``."""
        return model_version_uri(self.name, self.version)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelVersion:
        return cls(
            name=data["name"],
            version=str(data["version"]),
            source=data.get("source", ""),
            run_id=data.get("run_id", ""),
            status=data.get("status", ""),
            creation_timestamp=int(data.get("creation_timestamp", 0)),
            tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
            aliases=tuple(data.get("aliases", [])),
            model_id=data.get("model_id", "") or "",
        )


class Registry(MlflowHttp):
    """Registered models, versions and aliases."""

    def get_or_create_registered_model(self, name: str) -> RegisteredModel:
        """The registered model ``name``, created if missing (safe against races)."""
        try:
            return self.get_registered_model(name)
        except MlflowNotFound:
            pass
        try:
            answer = self._call("POST", "/mlflow/registered-models/create", json={"name": name})
            return RegisteredModel.from_json(answer["registered_model"])
        except MlflowError as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.get_registered_model(name)

    def get_registered_model(self, name: str) -> RegisteredModel:
        answer = self._call("GET", "/mlflow/registered-models/get", params={"name": name})
        return RegisteredModel.from_json(answer["registered_model"])

    def create_model_version(
        self,
        name: str,
        source: str,
        run_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        description: str | None = None,
        model_id: str | None = None,
    ) -> ModelVersion:
        """Register ``source`` as a new version of ``name``. Not idempotent: tag the version
        (e.g. with the owner's uid) and look it up with :meth:`search_model_versions` first.

        MLflow requires ``run_id`` when ``source`` is a ``runs:/`` or ``mlflow-artifacts:/``
        URI, and the source must lie inside that run's artifacts. An MLflow 3 logged model is
        registered with ``model_id`` and source ``models:/<model_id>`` (MLflow 2 servers ignore it).
        """
        body: dict[str, Any] = {
            "name": name,
            "source": source,
            "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()],
        }
        if run_id:
            body["run_id"] = run_id
        if description:
            body["description"] = description
        if model_id:
            body["model_id"] = model_id
        answer = self._call("POST", "/mlflow/model-versions/create", json=body)
        return ModelVersion.from_json(answer["model_version"])

    def search_model_versions(
        self, filter: str, order_by: Sequence[str] = ("version_number DESC",)
    ) -> list[ModelVersion]:
        """Model versions matching ``filter`` (see :func:`~slipway.mlflow.filters.model_version_filter`),
        newest first."""
        request = {"filter": filter, "max_results": 1000, "order_by": list(order_by)}
        found = self._pages("GET", "/mlflow/model-versions/search", request, "model_versions")
        return [ModelVersion.from_json(v) for v in found]

    def delete_model_version(self, name: str, version: str | int) -> None:
        """Delete one version of ``name``; an absent one is not an error."""
        try:
            body = {"name": name, "version": str(version)}
            self._call("DELETE", "/mlflow/model-versions/delete", json=body, idempotent=True)
        except MlflowNotFound:
            pass

    def get_model_version(self, name: str, version: str | int) -> ModelVersion:
        answer = self._call("GET", "/mlflow/model-versions/get", params={"name": name, "version": str(version)})
        return ModelVersion.from_json(answer["model_version"])

    def set_model_version_tag(self, name: str, version: str | int, key: str, value: str) -> None:
        body = {"name": name, "version": str(version), "key": key, "value": value}
        self._call("POST", "/mlflow/model-versions/set-tag", json=body, idempotent=True)

    def set_alias(self, name: str, alias: str, version: str | int) -> None:
        """Point ``alias`` of model ``name`` at ``version`` (moves it if it exists)."""
        body = {"name": name, "alias": alias, "version": str(version)}
        self._call("POST", "/mlflow/registered-models/alias", json=body, idempotent=True)

    def delete_alias(self, name: str, alias: str) -> None:
        """Remove ``alias`` from model ``name``; a missing alias is not an error."""
        try:
            body = {"name": name, "alias": alias}
            self._call("DELETE", "/mlflow/registered-models/alias", json=body, idempotent=True)
        except MlflowNotFound:
            pass

    def get_version_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        """The version ``alias`` points at; None when the alias (or the model) does not exist."""
        try:
            answer = self._call("GET", "/mlflow/registered-models/alias", params={"name": name, "alias": alias})
        except MlflowNotFound:
            return None
        return ModelVersion.from_json(answer["model_version"])
