"""The CRDs in crds/ are what the models generate, and they follow Kubernetes' structural rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slipway import crdgen

ROOT = Path(__file__).resolve().parents[3]
KINDS = {k.kind: k for k in crdgen.KINDS}


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.get("properties", {}).items():
            out += _walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


# The operator chart's files/crds/ are links to crds/ (a chart test holds them so).
CRD_DIRS = (ROOT / "crds", ROOT / "charts" / "slipway-crds" / "files")


@pytest.mark.parametrize("directory", CRD_DIRS, ids=["kustomize", "crd-chart"])
def test_no_drift(tmp_path, directory):
    """`make crds` output matches what is committed (crds/ and the CRD chart's files/)."""
    assert crdgen.main([str(tmp_path)]) == 0
    for kind in crdgen.KINDS:
        committed = directory / crdgen.file_name(kind)
        assert committed.read_text() == (tmp_path / crdgen.file_name(kind)).read_text(), (
            f"{committed} is stale: run `make crds`"
        )
    assert crdgen.main(["--check", *map(str, CRD_DIRS)]) == 0


def test_check_reports_drift_in_any_directory(tmp_path, capsys):
    """`make verify` checks both copies: a stale chart copy fails even when crds/ is current."""
    kustomize, chart = tmp_path / "crds", tmp_path / "chart-crds"
    assert crdgen.main([str(kustomize), str(chart)]) == 0
    assert crdgen.main(["--check", str(kustomize), str(chart)]) == 0
    (chart / crdgen.file_name(crdgen.KINDS[1])).unlink()
    assert crdgen.main(["--check", str(kustomize), str(chart)]) == 1
    err = capsys.readouterr().err
    assert str(chart / crdgen.file_name(crdgen.KINDS[1])) in err
    assert str(kustomize) + "/" not in err


def test_check_reports_drift(tmp_path, capsys):
    crdgen.main([str(tmp_path)])
    target = tmp_path / crdgen.file_name(crdgen.KINDS[0])
    target.write_text(target.read_text() + "# edited\n")
    assert crdgen.main(["--check", str(tmp_path)]) == 1
    assert "make crds" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "short"), [("TrainingRun", "tr"), ("ModelArtifact", "ma"), ("InferenceDeployment", "idep")]
)
def test_names_scope_and_subresources(kind, short):
    crd = yaml.safe_load((ROOT / "crds" / crdgen.file_name(KINDS[kind])).read_text())
    spec = crd["spec"]
    assert spec["group"] == "slipway.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == [short]
    assert spec["names"]["categories"] == ["slipway"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1"
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
             "labelSelectorPath": ".status.selector"}  # fmt: skip
    # The HPA scales an InferenceDeployment as a whole; the other kinds have no replicas.
    expected = {"status": {}, "scale": scale} if kind == "InferenceDeployment" else {"status": {}}
    assert version["subresources"] == expected
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Phase", "Ready", "Reason", "Age"} <= columns
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    # Keyed by type, so each condition is its own entry for server-side apply and merges.
    assert (conditions["x-kubernetes-list-type"], conditions["x-kubernetes-list-map-keys"]) == ("map", ["type"])
    assert "type" in conditions["items"]["required"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_schema_is_structural_and_described(kind):
    schema = crdgen.crd(KINDS[kind])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title", "$defs"} & set(node), path
        assert node.get("exclusiveMinimum") in (None, True) and node.get("exclusiveMaximum") in (None, True), path
        assert node.get("additionalProperties") is not False, path
        scalar_item = path.endswith(("[]", "{}")) and node.get("type") != "object"
        if (path.count(".") >= 2 or path in (".spec", ".status")) and not scalar_item:
            assert node.get("description"), f"{kind}{path} has no description"
        if not node.get("x-kubernetes-int-or-string"):
            assert "type" in node, f"{kind}{path} has no type"
        if "default" in node:
            assert not isinstance(node["default"], dict), path


def test_model_artifact_spec_is_immutable():
    spec = crdgen.crd(KINDS["ModelArtifact"])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"rule": "self == oldSelf"}.items() <= spec["x-kubernetes-validations"][0].items()


def test_union_of_types_is_refused():
    with pytest.raises(ValueError, match="union"):
        crdgen.structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})


def test_exclusive_bounds_use_openapi_v3_booleans():
    node = crdgen.structural({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, {})
    assert node == {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1}
