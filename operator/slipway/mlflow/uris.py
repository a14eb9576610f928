"""MLflow's model and run URIs: the one place that writes and reads ``models:/`` and ``runs:/``.

- ``models:/<name>/<version>[/<path>]`` — a registered model version (a non-numeric
  ``<version>`` is an MLflow stage, which Slipway does not use);
- ``models:/<name>@<alias>`` — the version an alias points at;
- ``models:/<model_id>`` — an MLflow 3 logged model;
- ``runs:/<run_id>[/<path>]`` — a file or directory in a run's artifacts.

And the links to MLflow's UI that status shows (the routes of MLflow 3's UI, a single-page app
behind ``#``): ``<ui>/#/experiments/<experiment>/runs/<run>``, ``<ui>/#/runs/<run>`` (the UI finds
the run's experiment) and ``<ui>/#/models/<name>/versions/<version>``.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

MODELS_SCHEME = "models:"
RUNS_SCHEME = "runs:"
MAX_DECODINGS = 8  # %25252e... deeper than this is refused, not decoded further


@dataclass(frozen=True)
class ModelUri:
    """A parsed ``models:/`` URI; exactly one of ``version``, ``alias`` or neither (a logged model)."""

    name: str  # the registered model, or the logged model's id
    version: str | None = None
    alias: str | None = None
    path: str = ""  # inside the version's artifacts

    @property
    def registered_version(self) -> str | None:
        """The version number this URI names, None for an alias, a stage or a logged model."""
        return self.version if self.version is not None and self.version.isdigit() else None


@dataclass(frozen=True)
class RunUri:
    """A parsed ``runs:/`` URI."""

    run_id: str
    path: str = ""  # inside the run's artifacts


def parse_model_uri(uri: str) -> ModelUri | None:
    """The parts of a ``models:/`` URI; None for any other URI."""
    if not uri.startswith(MODELS_SCHEME):
        return None
    ref = uri[len(MODELS_SCHEME) :].strip("/")
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return ModelUri(name, alias=alias)
    name, _, rest = ref.partition("/")
    if not rest:
        return ModelUri(name)
    version, _, path = rest.partition("/")
    return ModelUri(name, version=version, path=path.strip("/"))


def parse_run_uri(uri: str) -> RunUri | None:
    """The parts of a ``runs:/`` (or ``runs://``) URI; None for any other URI."""
    if not uri.startswith(RUNS_SCHEME):
        return None
    run_id, _, path = uri[len(RUNS_SCHEME) :].lstrip("/").partition("/")
    return RunUri(run_id, path.strip("/"))


def run_artifact_uri(run_id: str, artifact_path: str = "") -> str:
    """The ``runs:/<run_id>/<path>`` URI of a run's artifact."""
    return f"runs:/{run_id}/{artifact_path.strip('/')}".rstrip("/")


def model_version_uri(name: str, version: str | int) -> str:
    """The registry URI of one version, ``models:/<name>/<version>``."""
    return f"models:/{name}/{version}"


def _ui_part(text: str) -> str:
    """A path segment of a UI link, encoded as the UI encodes it (JavaScript's encodeURIComponent)."""
    return urllib.parse.quote(text, safe="!~*'()")


def ui_run_url(ui: str, run_id: str, experiment_id: str = "") -> str:
    """The MLflow UI's page of a run; without its experiment, the route that looks the experiment up."""
    base = ui.rstrip("/")
    if experiment_id:
        return f"{base}/#/experiments/{_ui_part(experiment_id)}/runs/{_ui_part(run_id)}"
    return f"{base}/#/runs/{_ui_part(run_id)}"


def ui_version_url(ui: str, name: str, version: str | int) -> str:
    """The MLflow UI's page of a registered model version."""
    return f"{ui.rstrip('/')}/#/models/{_ui_part(name)}/versions/{_ui_part(str(version))}"


def decoded(uri: str) -> str | None:
    """``uri`` percent-decoded again and again until it no longer changes (``%252e`` -> ``%2e`` ->
    ``.``), as a server that decodes a path more than once would read it; None if it is still
    changing after MAX_DECODINGS rounds."""
    for _ in range(MAX_DECODINGS):
        plain = urllib.parse.unquote(uri)
        if plain == uri:
            return plain
        uri = plain
    return None


def path_hazard(uri: str) -> str | None:
    """Why ``uri`` may not mean what it reads as, once decoded (:func:`decoded`), or None: a ``..``
    or ``.`` segment, a backslash, a control character, an empty segment inside the path (a
    ``//`` right after the scheme is the authority's and allowed, as is one trailing ``/``)."""
    plain = decoded(uri)
    if plain is None:
        return f"it is percent-encoded more than {MAX_DECODINGS} times over"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in plain):
        return "it holds a control character"
    if "\\" in plain:
        return "it holds a backslash"
    _, colon, rest = plain.partition(":")
    rest = rest if colon else plain
    rest = rest[2:] if rest.startswith("//") else rest  # scheme://authority/...
    segments = rest.strip("/").split("/") if rest.strip("/") else []
    if ".." in segments:
        return "it climbs out of its directory (..)"
    if "." in segments:
        return "it has a '.' segment"
    if "" in segments or rest.startswith("//"):
        return "it has an empty segment (//)"
    return None
