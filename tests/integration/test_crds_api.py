"""The real API server enforces Slipway's CRDs: the invalid catalog is refused with the error a
user must see, valid examples are accepted, and a ModelArtifact's spec cannot change."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from catalog import load_invalid, load_valid
from slipway_testing import GROUP, VERSION

pytestmark = pytest.mark.cluster
INVALID = load_invalid()


def create(kube_api, namespace, obj, dry_run: bool = True):
    return client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        obj["kind"].lower() + "s",
        copy.deepcopy(obj),
        dry_run="All" if dry_run else None,
        field_validation="Strict",
    )


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_spec_rejected_by_api_server(kube_api, slipway_crds, namespace, case):
    with pytest.raises(ApiException) as err:
        create(kube_api, namespace, case.obj)
    assert err.value.status == 422, err.value.body
    assert case.field in err.value.body, err.value.body
    if case.message:
        assert case.message in err.value.body, err.value.body


@pytest.mark.parametrize(("path", "obj"), load_valid(), ids=lambda v: getattr(v, "stem", ""))
def test_valid_examples_accepted_by_api_server(kube_api, slipway_crds, namespace, path, obj):
    create(kube_api, namespace, obj)


def test_model_artifact_spec_is_immutable(kube_api, slipway_crds, namespace):
    artifact = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelArtifact",
        "metadata": {"name": "frozen"},
        "spec": {"model": {"name": "digits"}, "source": {"uri": "runs:/abc/model"}},
    }
    create(kube_api, namespace, artifact, dry_run=False)
    api = client.CustomObjectsApi(kube_api)
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "modelartifacts", "frozen", {"spec": {"aliases": ["staging"]}}
        )
    assert err.value.status == 422
    assert "spec is immutable: a new model is a new ModelArtifact" in err.value.body


def test_kubectl_get_slipway_category_lists_all_kinds(kube_api, slipway_crds):
    ext = client.ApiextensionsV1Api(kube_api)
    for name in slipway_crds:
        crd = ext.read_custom_resource_definition(name)
        assert "slipway" in crd.spec.names.categories
