"""spec.traffic.mode InferencePool (the Gateway API Inference Extension): one pool per track selecting
exactly that track's serving pods, an endpoint picker per pool that is no serving pod, an HTTPRoute
whose backends are the pools with the step's weights, and a Role the operator may grant; a mode
changed away prunes the pickers' Deployments and never the track Deployments beside them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slipway import children, kinds, reconcile
from slipway.inference import build, routing, traffic
from slipway.inference.model import ENDPOINT_PICKER_IMAGE, InferenceDeploymentSpec
from slipway.inference.traffic.inference_pool import PICKER_LABEL, PICKER_PORT, picker_name, pool_name
from slipway.podspec import RESTRICTED_POD

UID = "uid-of-the-deployment"


def spec(**traffic_fields: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "llm", "alias": "candidate"}, "image": "vllm/vllm-openai:v0.11.0", "port": 8000,
        "traffic": {"mode": "InferencePool", "parentRefs": [{"name": "inference-gateway"}], **traffic_fields},
    })  # fmt: skip


def by_kind(objects: traffic.Objects) -> dict[str, list[dict[str, Any]]]:
    return {kind.kind: list(bodies) for kind, bodies in objects.items()}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_each_pool_selects_its_tracks_serving_pods_and_the_route_splits_between_the_pools():
    s = spec()
    objects = by_kind(traffic.router("InferencePool").objects("llm", "team", s, 10))
    pods = {
        t: build.deployment("llm", "team", s, t, "3", "models:/llm/3", None, 1)["spec"]["template"]["metadata"][
            "labels"
        ]
        for t in build.TRACKS
    }
    pools = {p["metadata"]["name"]: p["spec"] for p in objects["InferencePool"]}
    assert set(pools) == {"llm-stable", "llm-canary"}
    for track in build.TRACKS:
        pool = pools[pool_name("llm", track)]
        assert [t for t in build.TRACKS if matches(pool["selector"]["matchLabels"], pods[t])] == [track]
        assert pool["targetPorts"] == [{"number": 8000}]
        assert pool["endpointPickerRef"] == {"name": picker_name("llm", track), "port": {"number": PICKER_PORT},
                                             "failureMode": "FailClose"}  # fmt: skip
    [route] = objects["HTTPRoute"]
    assert route["spec"]["parentRefs"] == [{"name": "inference-gateway"}]
    backends = route["spec"]["rules"][0]["backendRefs"]
    assert [(b["group"], b["kind"], b["name"], b["weight"]) for b in backends] == [
        ("inference.networking.k8s.io", "InferencePool", "llm-stable", 90),
        ("inference.networking.k8s.io", "InferencePool", "llm-canary", 10),
    ]


def test_a_picker_per_pool_runs_restricted_and_is_no_serving_pod():
    objects = by_kind(traffic.router("InferencePool").objects("llm", "team", spec(), 10))
    services = {s["metadata"]["name"]: s["spec"] for s in objects["Service"]}
    assert "llm" in services  # the Service over both tracks, for clients that address it
    for track in build.TRACKS:
        [picker] = [d for d in objects["Deployment"] if d["metadata"]["name"] == picker_name("llm", track)]
        template = picker["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert labels[PICKER_LABEL] == pool_name("llm", track) and build.DEPLOYMENT_LABEL not in labels
        assert matches(services[picker_name("llm", track)]["selector"], labels)
        [container] = template["spec"]["containers"]
        assert container["image"] == ENDPOINT_PICKER_IMAGE and "command" not in container
        assert container["args"][:4] == ["--pool-name", pool_name("llm", track), "--pool-namespace", "team"]
        assert template["spec"]["securityContext"] == RESTRICTED_POD
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert template["spec"]["serviceAccountName"] == objects["ServiceAccount"][0]["metadata"]["name"]
        assert picker["metadata"]["labels"][traffic.base.ROUTED_LABEL] == "true"

    chosen = spec(endpointPicker={"image": "registry.example.com/epp:v1.5.0", "failureMode": "FailOpen"})
    objects = by_kind(traffic.router("InferencePool").objects("llm", "team", chosen, 0))
    assert {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in objects["Deployment"]} == {
        "registry.example.com/epp:v1.5.0"
    }
    assert {p["spec"]["endpointPickerRef"]["failureMode"] for p in objects["InferencePool"]} == {"FailOpen"}


def test_the_pickers_role_reads_only_and_grants_nothing_the_operator_lacks():
    # RBAC lets the operator create a Role only with permissions it holds itself (no escalate verb).
    objects = by_kind(traffic.router("InferencePool").objects("llm", "team", spec(), 10))
    [role] = objects["Role"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}  # fmt: skip
    assert {v for _, _, v in granted} == {"get", "list", "watch"}
    assert ("", "pods", "list") in granted and ("inference.networking.k8s.io", "inferencepools", "watch") in granted
    assert granted <= kinds.rbac_grants()
    [binding] = objects["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": objects["ServiceAccount"][0]["metadata"]["name"],
                                    "namespace": "team"}]  # fmt: skip


def test_an_endpoint_picker_outside_inference_pool_mode_or_no_gateway_is_refused():
    with pytest.raises(ValidationError, match="endpointPicker: only for mode InferencePool"):
        InferenceDeploymentSpec.model_validate({"model": {"name": "llm", "alias": "candidate"}, "image": "i",
                                                "traffic": {"endpointPicker": {"image": "epp"}}})  # fmt: skip
    with pytest.raises(ValidationError, match="need parentRefs"):
        InferenceDeploymentSpec.model_validate({"model": {"name": "llm", "alias": "candidate"}, "image": "i",
                                                "traffic": {"mode": "InferencePool"}})  # fmt: skip


class Cache:
    def __init__(self, owned: list[dict[str, Any]]) -> None:
        self.owned = owned

    def owned_by(self, index: str, uid: str) -> list[dict[str, Any]]:
        return [o for o in self.owned if o["index"] == index and uid == UID]


def owned(index: str, kind: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    ref = {"controller": True, "uid": UID, "kind": "InferenceDeployment", "name": "llm"}
    meta = {"name": name, "namespace": "team", "labels": labels, "ownerReferences": [ref], "uid": f"uid-{name}"}
    return {"index": index, "kind": kind, "metadata": meta}


def test_a_mode_changed_away_prunes_the_pickers_and_not_the_track_deployments(monkeypatch: pytest.MonkeyPatch):
    routed = traffic.router("InferencePool").objects("llm", "team", spec(), 10)
    made = [owned(kind.index, kind.kind, body["metadata"]["name"], body["metadata"]["labels"])
            for kind, bodies in routed.items() for body in bodies]  # fmt: skip
    tracks = [owned("deployments", "Deployment", build.deployment_name("llm", t), build.selector("llm", t))
              for t in build.TRACKS]  # fmt: skip
    deleted: list[tuple[str, str]] = []
    monkeypatch.setattr(reconcile.children, "delete", lambda kube, d, ns, obj: deleted.append((d.kind, d.name)))
    body = {"kind": "InferenceDeployment", "metadata": {"name": "llm", "namespace": "team", "uid": UID}}
    ctx = reconcile.Context(("inferencedeployments", "team", "llm"), body, None, None, Cache(made + tracks), None)  # type: ignore[arg-type]
    ctx.ensure = lambda index, body, create_extra=None: body  # type: ignore[method-assign]

    replicas = InferenceDeploymentSpec.model_validate({"model": {"name": "llm", "alias": "candidate"}, "image": "i"})
    now = traffic.router("Replicas").objects("llm", "team", replicas, 0)
    routing.before_pods(ctx, now)
    routing.after_pods(ctx, now)
    pickers = {("Deployment", d["metadata"]["name"]) for d in routed[kinds.DEPLOYMENT]}
    assert pickers <= set(deleted)
    assert not set(deleted) & {("Deployment", build.deployment_name("llm", t)) for t in build.TRACKS}
    assert {kind for kind, _ in deleted} == {"Service", "Deployment", "InferencePool", "HTTPRoute", "ServiceAccount",
                                             "Role", "RoleBinding"}  # fmt: skip
    assert ("Service", "llm") not in deleted  # the Service over both tracks serves Replicas mode too


def test_the_pools_and_pickers_exist_before_the_route_and_a_foreign_role_is_never_bound():
    """What the route points at is ensured before the route; a Role squatted under the pickers' name by
    someone else (a namespace editor granting themselves more) is refused, and no RoleBinding follows."""
    routed = traffic.router("InferencePool").objects("llm", "team", spec(), 10)
    ensured: list[str] = []

    class Squatted:
        def ensure(self, index: str, body: dict[str, Any], create_extra: Any = None) -> dict[str, Any]:
            if body["kind"] == "Role":
                decision = children.Decision("Refuse", "Role", body["metadata"]["name"], "owned by no one")
                raise children.OwnedByOther(decision)
            ensured.append(body["kind"])
            return body

        def prune(self, index: str, wanted: list[str], only: Any = None) -> None:
            pass

    routing.before_pods(Squatted(), routed)  # type: ignore[arg-type]
    with pytest.raises(children.OwnedByOther):
        routing.after_pods(Squatted(), routed)  # type: ignore[arg-type]
    assert "RoleBinding" not in ensured and "ServiceAccount" in ensured

    ensured.clear()
    quiet = Squatted()
    quiet.ensure = lambda index, body, create_extra=None: ensured.append(body["kind"]) or body  # type: ignore[method-assign]
    routing.after_pods(quiet, routed)  # type: ignore[arg-type]
    assert ensured.index("InferencePool") < ensured.index("HTTPRoute")
    assert ensured.index("Deployment") < ensured.index("HTTPRoute")
    assert ensured.index("Role") < ensured.index("RoleBinding")
