"""docs/how-to/gitops.md, "Install Slipway from Git", as a reader copies it: the Argo CD Applications
and the Flux GitRepository and HelmReleases read from the page's YAML blocks.

Without a cluster: each Application and HelmRelease names a chart of this repository at the release
tag of the tree's version, its release and namespace, and values the chart has; `helm template` of
each chart with those values renders, Argo CD's and Flux's releases render the same objects, and
every CRD is rendered by exactly one release. On the local cluster: the API server accepts what they
render (a server-side dry run).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from slipway_e2e.deploy import KUBECTL
from slipway_testing.docs import blocks

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".cache" / "helm" / "helm"
PAGE = ROOT / "docs" / "how-to" / "gitops.md"
SECTION = "Install Slipway from Git"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Release:
    """A Helm release a GitOps object asks for: its name, namespace, chart directory and values."""

    name: str
    namespace: str
    chart: Path
    values: Obj


def page_objects() -> list[Obj]:
    docs = [yaml.safe_load_all(b.text) for b in blocks(PAGE, {"yaml"}) if b.heading == SECTION]
    return [o for doc in docs for o in doc if o]


def of_kind(kind: str) -> list[Obj]:
    return [o for o in page_objects() if o["kind"] == kind]


def chart_meta(chart: Path) -> Obj:
    assert (chart / "Chart.yaml").is_file(), f"{chart.relative_to(ROOT)} is not a chart of this repository"
    return yaml.safe_load((chart / "Chart.yaml").read_text())  # type: ignore[no-any-return]


def unknown_values(given: Obj, defaults: Obj, path: str = "") -> Iterator[str]:
    """Keys of ``given`` the chart's values.yaml does not have (a map empty by default takes any)."""
    for key, value in given.items():
        if key not in defaults:
            yield f"{path}{key}"
        elif isinstance(value, dict) and isinstance(defaults[key], dict) and defaults[key]:
            yield from unknown_values(value, defaults[key], f"{path}{key}.")


def checked(release: Release, repo_url: str, revision: str) -> Release:
    """``release`` once its source is this repository at the tree's tag and its values are the chart's."""
    meta = chart_meta(release.chart)
    assert repo_url == meta["home"], f"{release.name}: {repo_url} is not the chart's repository {meta['home']}"
    assert revision == f"v{meta['version']}", f"{release.name}: {revision}, not the release tag v{meta['version']}"
    defaults = yaml.safe_load((release.chart / "values.yaml").read_text()) or {}
    assert list(unknown_values(release.values, defaults)) == [], f"{release.name}: values the chart does not have"
    return release


def argo_releases() -> list[Release]:
    apps = of_kind("Application")
    releases = []
    for app in apps:
        assert app["apiVersion"] == "argoproj.io/v1alpha1"
        source, helm = app["spec"]["source"], app["spec"]["source"].get("helm", {})
        assert helm.get("releaseName") == app["metadata"]["name"], "an Application named as its release"
        release = Release(
            helm["releaseName"],
            app["spec"]["destination"]["namespace"],
            ROOT / source["path"],
            helm.get("valuesObject") or {},
        )
        releases.append(checked(release, source["repoURL"], source["targetRevision"]))
    return releases


def flux_releases() -> list[Release]:
    sources = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in of_kind("GitRepository")}
    objs = of_kind("HelmRelease")
    names = {o["metadata"]["name"] for o in objs}
    releases = []
    for obj in objs:
        assert obj["apiVersion"] == "helm.toolkit.fluxcd.io/v2"
        spec = obj["spec"]["chart"]["spec"]
        ref = spec["sourceRef"]
        source = sources[(ref.get("namespace", obj["metadata"]["namespace"]), ref["name"])]
        assert ref["kind"] == "GitRepository" and source["apiVersion"] == "source.toolkit.fluxcd.io/v1"
        assert {d["name"] for d in obj["spec"].get("dependsOn", [])} <= names, "dependsOn names a HelmRelease here"
        release = Release(
            obj["spec"].get("releaseName", obj["metadata"]["name"]),
            obj["metadata"]["namespace"],
            ROOT / spec["chart"],
            obj["spec"].get("values") or {},
        )
        releases.append(checked(release, source["spec"]["url"], source["spec"]["ref"]["tag"]))
    return releases


def helm(*args: str) -> str:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make helm`", pytrace=False)
    home = HELM.parent / "home"
    env = {**os.environ, **{f"HELM_{d.upper()}_HOME": str(home / d) for d in ("cache", "config", "data")}}
    done = subprocess.run([str(HELM), *args], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def render(release: Release, tmp_path: Path, namespace: str | None = None) -> list[Obj]:
    """`helm template` as Argo CD and Flux run it: the release's name, namespace and values."""
    values = tmp_path / f"{release.name}-values.yaml"
    values.write_text(yaml.safe_dump(release.values))
    out = helm(
        "template",
        release.name,
        str(release.chart),
        "-n",
        namespace or release.namespace,
        "-f",
        str(values),
        "--include-crds",
    )
    return [o for o in yaml.safe_load_all(out) if o]


def key(o: Obj) -> tuple[str, str, str]:
    return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]


def test_the_page_gives_both_charts_to_argo_cd_and_to_flux():
    charts = {"charts/slipway-crds", "charts/slipway"}
    for releases in (argo_releases(), flux_releases()):
        assert {str(r.chart.relative_to(ROOT)) for r in releases} == charts
        assert {r.namespace for r in releases} == {"slipway-system"}
    (crds,) = [o for o in of_kind("HelmRelease") if o["metadata"]["name"] == "slipway-crds"]
    (operator,) = [o for o in of_kind("HelmRelease") if o["metadata"]["name"] == "slipway"]
    assert "dependsOn" not in crds["spec"] and operator["spec"]["dependsOn"] == [{"name": "slipway-crds"}]
    (crd_app,) = [a for a in of_kind("Application") if a["metadata"]["name"] == "slipway-crds"]
    assert int(crd_app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) < 0  # before the operator
    assert "ServerSideApply=true" in crd_app["spec"]["syncPolicy"]["syncOptions"]


def test_the_releases_render_and_each_crd_has_one_owner(tmp_path):
    argo = {r.name: render(r, tmp_path) for r in argo_releases()}
    flux = {r.name: render(r, tmp_path) for r in flux_releases()}
    assert {n: sorted(map(key, objs)) for n, objs in argo.items()} == {
        n: sorted(map(key, objs)) for n, objs in flux.items()
    }, "Argo CD and Flux install different objects"
    owners = [
        (n, o["metadata"]["name"]) for n, objs in argo.items() for o in objs if o["kind"] == "CustomResourceDefinition"
    ]
    crds = {p.name.removeprefix("slipway.dev_").removesuffix(".yaml") for p in (ROOT / "crds").glob("slipway.dev_*")}
    assert sorted(name for _, name in owners) == sorted(f"{plural}.slipway.dev" for plural in crds), owners
    assert {n for n, _ in owners} == {"slipway-crds"}
    (deployment,) = [o for o in argo["slipway"] if o["kind"] == "Deployment"]
    assert deployment["metadata"]["name"] == "slipway-operator"
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    operator = next(r for r in argo_releases() if r.name == "slipway")
    assert env["SLIPWAY_MLFLOW_URL"] == operator.values["mlflow"]["url"]
    assert env["SLIPWAY_PROMETHEUS_URL"] == operator.values["prometheus"]["url"]


@pytest.mark.cluster
def test_the_api_server_accepts_what_the_releases_render(cluster, namespace, tmp_path):
    """Into the test's namespace (the page's slipway-system may not exist here), a server-side dry run."""
    objs = [o for r in argo_releases() for o in render(r, tmp_path, namespace)]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(
        [str(KUBECTL), "apply", "--server-side", "--dry-run=server", "--force-conflicts", "-f", "-"],
        input=yaml.safe_dump_all(objs),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(objs), done.stdout
