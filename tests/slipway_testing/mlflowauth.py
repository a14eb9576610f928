"""MLflow's basic-auth app as an MLflow admin drives it (docs/concepts/security.md, "MLflow's own
permissions"): users, their grants on experiments and registered models, and raw requests as a
user. Raw HTTP on purpose: an attack's request is exactly what is sent, and MLflow's answer exactly
what comes back."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import httpx

API = "/api/2.0/mlflow"
GRANT = "/api/3.0/mlflow/users/permissions/grant"  # mlflow/server/auth/routes.py GRANT_USER_PERMISSION


@dataclass(frozen=True)
class User:
    name: str
    password: str

    @property
    def auth(self) -> tuple[str, str]:
        return self.name, self.password

    def secret(self, name: str) -> dict[str, Any]:
        """A Kubernetes Secret holding this user's credentials as MLflow's client reads them."""
        data = {"MLFLOW_TRACKING_USERNAME": self.name, "MLFLOW_TRACKING_PASSWORD": self.password}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}


class MlflowAs:
    """Requests to the MLflow at ``url`` as ``user``: each answer as it came."""

    def __init__(self, url: str, user: User) -> None:
        self.user = user
        self.http = httpx.Client(base_url=url, auth=user.auth, timeout=30)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(API + path, params=params)

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(API + path, json=body)

    def delete(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.request("DELETE", API + path, json=body)

    def ok(self, response: httpx.Response) -> dict[str, Any]:
        assert response.status_code == 200, (response.request.url.path, response.status_code, response.text[:300])
        return response.json()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.http.close()


class MlflowAdmin(MlflowAs):
    """The basic-auth app's admin: makes users and grants them permissions."""

    def create_user(self, name: str) -> User:
        user = User(name, secrets.token_urlsafe(18))
        self.ok(self.post("/users/create", {"username": user.name, "password": user.password}))
        return user

    def grant(self, user: User, resource_type: str, resource_id: str, permission: str) -> None:
        """``permission`` (READ, USE, EDIT, MANAGE) on an ``experiment`` (by id) or a
        ``registered_model`` (by name); a grant already there is kept."""
        body = {"username": user.name, "resource_type": resource_type, "resource_id": resource_id,
                "permission": permission}  # fmt: skip
        answer = self.http.post(GRANT, json=body)
        if answer.status_code != 200 and "RESOURCE_ALREADY_EXISTS" not in answer.text:
            self.ok(answer)

    def experiment(self, name: str) -> str:
        return str(self.ok(self.post("/experiments/create", {"name": name}))["experiment_id"])

    def run(self, experiment_id: str) -> str:
        return str(self.ok(self.post("/runs/create", {"experiment_id": experiment_id}))["run"]["info"]["run_id"])

    def model(self, name: str) -> None:
        self.ok(self.post("/registered-models/create", {"name": name}))

    def version(self, model: str, run_id: str) -> str:
        body = {"name": model, "source": f"runs:/{run_id}/model", "run_id": run_id}
        return str(self.ok(self.post("/model-versions/create", body))["model_version"]["version"])

    def alias(self, model: str, alias: str, version: str) -> None:
        self.ok(self.post("/registered-models/alias", {"name": model, "alias": alias, "version": version}))

    def versions(self, model: str) -> list[str]:
        found = self.ok(self.get("/model-versions/search", filter=f"name='{model}'"))
        return sorted(v["version"] for v in found.get("model_versions", []))

    def aliased(self, model: str, alias: str) -> str:
        return str(self.ok(self.get("/registered-models/alias", name=model, alias=alias))["model_version"]["version"])
