"""spec.traffic.mode InferencePool: the Gateway API Inference Extension (GIE). One InferencePool per
track selects that track's serving pods; an endpoint picker per pool (GIE's EPP: a Deployment and its
Service) chooses, for each request, the pool's pod with the shortest queue and the most KV cache
free; one HTTPRoute on the user's Gateways splits traffic between the two pools with the step's
exact weights. The split, its pods and the canary's capacity are those of GatewayAPI mode.

The pickers read the pool's pods and objects through the API server, as a ServiceAccount of the
deployment's namespace bound to a Role that grants only reading them there. The Service over both
tracks stays, for clients that address it, and leaves the canary out while its pods are held with no
traffic (spec.rollout.scaleDownDelaySeconds)."""

from __future__ import annotations

from typing import Any

from slipway.inference import build
from slipway.inference.model import ENDPOINT_PICKER_IMAGE, InferenceDeploymentSpec
from slipway.inference.traffic.base import ROUTED, Objects
from slipway.inference.traffic.gateway_api import GatewayAPI
from slipway.kinds import (
    DEPLOYMENT,
    HTTPROUTE,
    INFERENCE_MODEL_REWRITE,
    INFERENCE_OBJECTIVE,
    INFERENCE_POOL,
    POD,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    Kind,
)
from slipway.names import MANAGED_BY, dns1035_name, dns1123_name, label_value
from slipway.podspec import RESTRICTED_CONTAINER, RESTRICTED_POD

PICKER_LABEL = "slipway.dev/endpoint-picker"  # on a picker's pods: its pool
PICKER_PORT = 9002  # ext_proc (gRPC): what the gateway asks
HEALTH_PORT = 9003  # gRPC health
METRICS_PORT = 9090
# What a picker reads in its namespace (granted by the deployment's Role; the operator holds each).
PICKER_READS = (POD, INFERENCE_POOL, INFERENCE_OBJECTIVE, INFERENCE_MODEL_REWRITE)


def pool_name(name: str, track: str) -> str:
    return dns1035_name(name, track)


def picker_name(name: str, track: str) -> str:
    """The picker's Deployment and Service."""
    return dns1035_name(pool_name(name, track), "epp")


def access_name(name: str) -> str:
    """The pickers' ServiceAccount, Role and RoleBinding."""
    return dns1123_name(name, "epp")


def _labels(name: str) -> dict[str, str]:
    return {**MANAGED_BY, **build.selector(name), **ROUTED}


def _meta(name: str, namespace: str, owner: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": _labels(owner)}


def inference_pool(name: str, namespace: str, spec: InferenceDeploymentSpec, track: str) -> dict[str, Any]:
    picker = spec.traffic.endpoint_picker
    ref: dict[str, Any] = {"name": picker_name(name, track), "port": {"number": PICKER_PORT}}
    ref["failureMode"] = (picker.failure_mode if picker else None) or "FailClose"
    return {
        "apiVersion": INFERENCE_POOL.api_version,
        "kind": INFERENCE_POOL.kind,
        "metadata": _meta(pool_name(name, track), namespace, name),
        "spec": {
            "selector": {"matchLabels": build.selector(name, track)},
            "targetPorts": [{"number": spec.port}],
            "endpointPickerRef": ref,
        },
    }


def picker_service(name: str, namespace: str, track: str) -> dict[str, Any]:
    pool = pool_name(name, track)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(picker_name(name, track), namespace, name),
        "spec": {
            "selector": {PICKER_LABEL: label_value(pool)},
            # As GIE's chart names them: the gateway asks the picker (gRPC over TLS), Prometheus scrapes it.
            "ports": [
                {"name": "grpc-ext-proc", "port": PICKER_PORT, "targetPort": PICKER_PORT},
                {"name": "http-metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT},
            ],
        },
    }


def picker_deployment(name: str, namespace: str, spec: InferenceDeploymentSpec, track: str) -> dict[str, Any]:
    """GIE v1.5's EPP for one pool, as GIE's chart runs it: restricted, one replica."""
    pool = pool_name(name, track)
    picker = spec.traffic.endpoint_picker
    args = [
        "--pool-name",
        pool,
        "--pool-namespace",
        namespace,
        "--pool-group",
        INFERENCE_POOL.group,
        "--grpc-port",
        str(PICKER_PORT),
        "--grpc-health-port",
        str(HEALTH_PORT),
        "--metrics-port",
        str(METRICS_PORT),
        "--metrics-endpoint-auth=false",
        "--tracing=false",
    ]
    # The gateway talks TLS to it (EPP's own certificate, as GIE's chart runs it). Probed with TCP on its
    # ext_proc port, which any kubelet runs (GIE's chart probes its gRPC health service on 9003).
    health = {"tcpSocket": {"port": PICKER_PORT}}
    container = {
        "name": "epp",
        "image": (picker.image if picker else None) or ENDPOINT_PICKER_IMAGE,
        "args": args,
        "ports": [
            {"name": "grpc", "containerPort": PICKER_PORT},
            {"name": "grpc-health", "containerPort": HEALTH_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "readinessProbe": {**health, "periodSeconds": 2},
        "livenessProbe": {**health, "initialDelaySeconds": 5, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {**RESTRICTED_CONTAINER, "readOnlyRootFilesystem": True},
    }
    labels = {**MANAGED_BY, PICKER_LABEL: label_value(pool)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(picker_name(name, track), namespace, name),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {PICKER_LABEL: label_value(pool)}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": access_name(name),
                    "securityContext": dict(RESTRICTED_POD),
                    "containers": [container],
                },
            },
        },
    }


def picker_access(name: str, namespace: str) -> dict[Kind, tuple[dict[str, Any], ...]]:
    """The pickers' ServiceAccount, a Role reading what they read in this namespace, and their binding."""
    who = access_name(name)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(who, namespace, name)}
    rules = [{"apiGroups": [k.group], "resources": [k.plural], "verbs": ["get", "list", "watch"]} for k in PICKER_READS]
    role = {"apiVersion": ROLE.api_version, "kind": "Role", "metadata": _meta(who, namespace, name), "rules": rules}
    binding = {
        "apiVersion": ROLE_BINDING.api_version,
        "kind": "RoleBinding",
        "metadata": _meta(who, namespace, name),
        "roleRef": {"apiGroup": ROLE.group, "kind": "Role", "name": who},
        "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": namespace}],
    }
    return {SERVICE_ACCOUNT: (account,), ROLE: (role,), ROLE_BINDING: (binding,)}


def pool_route(name: str, namespace: str, spec: InferenceDeploymentSpec, canary_weight: int) -> dict[str, Any]:
    """The HTTPRoute of GatewayAPI mode with the track pools as its backends."""
    route = build.http_route(name, namespace, spec, canary_weight)
    weights = {"stable": 100 - canary_weight, "canary": canary_weight}
    route["spec"]["rules"] = [
        {
            "backendRefs": [
                {
                    "group": INFERENCE_POOL.group,
                    "kind": INFERENCE_POOL.kind,
                    "name": pool_name(name, t),
                    "weight": weights[t],
                }
                for t in build.TRACKS
            ]
        }
    ]
    return route


class InferencePool(GatewayAPI):
    mode = "InferencePool"
    kinds: tuple[Kind, ...] = (SERVICE, SERVICE_ACCOUNT, ROLE, ROLE_BINDING, DEPLOYMENT, INFERENCE_POOL, HTTPROUTE)
    weights_apart_from_pods = True

    def objects(
        self, name: str, namespace: str, spec: InferenceDeploymentSpec, canary_weight: int, held_out: bool = False
    ) -> Objects:
        both = build.service(name, namespace, spec, selects="stable" if held_out else None)
        pickers = tuple(picker_service(name, namespace, t) for t in build.TRACKS)
        return {
            **picker_access(name, namespace),
            SERVICE: (both, *pickers),
            DEPLOYMENT: tuple(picker_deployment(name, namespace, spec, t) for t in build.TRACKS),
            INFERENCE_POOL: tuple(inference_pool(name, namespace, spec, t) for t in build.TRACKS),
            HTTPROUTE: (pool_route(name, namespace, spec, canary_weight),),
        }
