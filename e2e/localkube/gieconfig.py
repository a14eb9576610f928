"""The inference gateway's Envoy configuration, from the Gateway API and Inference Extension
objects (pure functions; :mod:`localkube.gie` watches the objects and writes the files).

What an HTTPRoute attached to a Gateway of the inference GatewayClass becomes:

- one listener (127.0.0.1:``port``, every Gateway of the class) whose route configuration (RDS)
  has a virtual host per hostname of the routes (``*`` without any);
- per rule, a route on its matches (path ``PathPrefix``/``Exact``, exact headers; ``/`` without
  any) to ``weighted_clusters``: one cluster per InferencePool backendRef, at its weight;
- per InferencePool, an ``ORIGINAL_DST`` cluster that sends each request to the address its
  endpoint picker (EPP) put in the header ``x-gateway-destination-endpoint``, and the EPP's own
  cluster (HTTP/2, gRPC) on the ready addresses of the EPP Service's EndpointSlices, over TLS
  that is not verified (as GIE's own Envoy examples do: the EPP serves a self-signed
  certificate unless started with ``--secure-serving=false``, then plaintext);
- one ext_proc filter in the listener, in GIE's processing mode (headers sent, bodies
  ``FULL_DUPLEX_STREAMED``, trailers sent: streaming answers pass token by token), pointed per
  weighted cluster (``ExtProcPerRoute`` overrides) at that pool's EPP. The EPP clears the route
  cache when it sets the header; the filter keeps it (``route_cache_action: RETAIN``), else the
  weighted cluster would be drawn again after the EPP of the first draw chose an endpoint.

Not implemented (a test data plane): other backend kinds (their weight is dropped), filters,
redirects, query matches, listener hostnames and ``allowedRoutes``, TLS listeners. A pool's
``failureMode: FailOpen`` is served as ``FailClose``: without the EPP's header an
``ORIGINAL_DST`` cluster would send the request back to the listener itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]
GATEWAY_GROUP = "gateway.networking.k8s.io"
POOL_GROUP = "inference.networking.k8s.io"
DESTINATION_HEADER = "x-gateway-destination-endpoint"
UPSTREAM_HEADER = "x-localkube-upstream"  # on every answer: the address that served it
EXT_PROC = "envoy.filters.http.ext_proc"
NO_EPP = "epp/none"  # the filter's default service: a route without an override fails closed
ROUTE_CONFIG = "inference"
LISTENER = "inference"
_T = "type.googleapis.com/envoy."
CLUSTER = _T + "config.cluster.v3.Cluster"
# GIE's reference Envoy configuration (test/testdata/envoy.yaml in the GIE module).
PROCESSING_MODE = {
    "request_header_mode": "SEND",
    "response_header_mode": "SEND",
    "request_body_mode": "FULL_DUPLEX_STREAMED",
    "response_body_mode": "FULL_DUPLEX_STREAMED",
    "request_trailer_mode": "SEND",
    "response_trailer_mode": "SEND",
}
LIMITS = {"thresholds": [{"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000}]}


def key(obj: JSON) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def pool_cluster(ns: str, name: str) -> str:
    return f"inferencepool/{ns}/{name}"


def epp_cluster(ns: str, name: str) -> str:
    return f"epp/{ns}/{name}"


def bootstrap(admin_port: int, lds: str, cds: str) -> JSON:
    """Envoy's bootstrap: the admin API on 127.0.0.1, listeners and clusters from the files
    ``lds`` and ``cds`` (reloaded when a new file is moved over them)."""
    return {
        "node": {"id": "localkube-inference", "cluster": "localkube-inference"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "dynamic_resources": {
            "lds_config": {"path_config_source": {"path": lds}, "resource_api_version": "V3"},
            "cds_config": {"path_config_source": {"path": cds}, "resource_api_version": "V3"},
        },
    }


def attached(route: JSON, gateways: set[tuple[str, str]]) -> bool:
    """Whether the HTTPRoute names one of ``gateways`` (namespace, name) as a parent."""
    ns = route["metadata"]["namespace"]
    for ref in route["spec"].get("parentRefs") or []:
        gateway = ref.get("group", GATEWAY_GROUP) == GATEWAY_GROUP and ref.get("kind", "Gateway") == "Gateway"
        if gateway and (ref.get("namespace", ns), ref["name"]) in gateways:
            return True
    return False


def _match(match: JSON) -> JSON:
    path = match.get("path") or {"type": "PathPrefix", "value": "/"}
    out: JSON = {"path": path["value"]} if path.get("type") == "Exact" else {"prefix": path.get("value", "/")}
    if path.get("type") != "Exact" and out["prefix"] != "/":
        out = {"path_separated_prefix": out["prefix"].rstrip("/")}
    headers = [h for h in match.get("headers") or [] if h.get("type", "Exact") == "Exact"]
    if headers:
        out["headers"] = [{"name": h["name"], "string_match": {"exact": h["value"]}} for h in headers]
    return out


def _weighted(ns: str, backends: list[JSON], pools: dict[tuple[str, str], JSON]) -> list[JSON]:
    out = []
    for ref in backends:
        if ref.get("group") != POOL_GROUP or ref.get("kind") != "InferencePool":
            continue
        pool_ns = ref.get("namespace", ns)
        pool = pools.get((pool_ns, ref["name"]))
        if pool is None:
            continue
        epp = pool["spec"]["endpointPickerRef"]
        service = {"envoy_grpc": {"cluster_name": epp_cluster(pool_ns, ref["name"]),
                                  "authority": f"{epp['name']}.{pool_ns}:{epp['port']['number']}"},
                   "timeout": "10s"}  # fmt: skip
        per_route = {"@type": _T + "extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
                     "overrides": {"grpc_service": service}}  # fmt: skip
        out.append({"name": pool_cluster(pool_ns, ref["name"]), "weight": int(ref.get("weight", 1)),
                    "typed_per_filter_config": {EXT_PROC: per_route}})  # fmt: skip
    return out


def routes(http_routes: list[JSON], pools: dict[tuple[str, str], JSON]) -> JSON:
    """The route configuration of the HTTPRoutes (already known to be attached), oldest first."""
    hosts: dict[str, list[JSON]] = {}
    ordered = sorted(http_routes, key=lambda r: (r["metadata"].get("creationTimestamp", ""), *key(r)))
    for route in ordered:
        ns = route["metadata"]["namespace"]
        entries = []
        for i, rule in enumerate(route["spec"].get("rules") or []):
            clusters = _weighted(ns, rule.get("backendRefs") or [], pools)
            action: JSON
            if sum(c["weight"] for c in clusters) > 0:
                action = {"route": {"weighted_clusters": {"clusters": clusters}, "timeout": "0s",
                                    "idle_timeout": "3600s"}}  # fmt: skip
            else:  # as Gateway API says of a rule whose backends are all invalid or weigh 0
                action = {"direct_response": {"status": 500}}
            for match in rule.get("matches") or [{}]:
                entries.append({"name": f"{ns}/{route['metadata']['name']}/{i}", "match": _match(match), **action})
        for host in route["spec"].get("hostnames") or ["*"]:
            hosts.setdefault(host, []).extend(entries)
    virtual_hosts = []
    served_by = [{"header": {"key": UPSTREAM_HEADER, "value": "%UPSTREAM_REMOTE_ADDRESS%"}}]
    for host, entries in sorted(hosts.items()):
        # The most specific match first: exact paths, then the longest prefixes.
        entries.sort(key=lambda e: ("path" not in e["match"], -len(_path(e["match"]))))
        virtual_hosts.append({"name": host, "domains": [host, f"{host}:*"] if host != "*" else ["*"],
                              "routes": entries, "response_headers_to_add": served_by})  # fmt: skip
    return {"@type": _T + "config.route.v3.RouteConfiguration", "name": ROUTE_CONFIG, "virtual_hosts": virtual_hosts}


def _path(match: JSON) -> str:
    return str(match.get("path") or match.get("path_separated_prefix") or match.get("prefix") or "")


def listener(port: int, rds: str) -> JSON:
    """The listener of every Gateway of the class: the ext_proc filter, then the router."""
    ext_proc = {
        "@type": _T + "extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": NO_EPP}, "timeout": "10s"},
        "failure_mode_allow": False,
        "processing_mode": PROCESSING_MODE,
        "message_timeout": "1000s",
        "route_cache_action": "RETAIN",
    }
    manager = {
        "@type": _T + "extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "inference",
        "rds": {"route_config_name": ROUTE_CONFIG,
                "config_source": {"path_config_source": {"path": rds}, "resource_api_version": "V3"}},
        "http_filters": [
            {"name": EXT_PROC, "typed_config": ext_proc},
            {"name": "envoy.filters.http.router",
             "typed_config": {"@type": _T + "extensions.filters.http.router.v3.Router",
                              "suppress_envoy_headers": True}},
        ],
        "stream_idle_timeout": "3600s",
        "request_timeout": "0s",
    }  # fmt: skip
    return {
        "@type": _T + "config.listener.v3.Listener",
        "name": LISTENER,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                        "typed_config": manager}]}],
    }  # fmt: skip


def _static(name: str, addresses: list[tuple[str, int]]) -> JSON:
    endpoints = [{"endpoint": {"address": {"socket_address": {"address": ip, "port_value": port}}}}
                 for ip, port in addresses]  # fmt: skip
    return {"@type": CLUSTER, "name": name, "type": "STATIC", "connect_timeout": "5s", "circuit_breakers": LIMITS,
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]}}  # fmt: skip


def epp_addresses(pool: JSON, services: dict[tuple[str, str], JSON], slices: list[JSON]) -> list[tuple[str, int, str]]:
    """The ready (address, port, pod name) of the pool's EPP: the Service port its
    ``endpointPickerRef`` names, resolved through the Service's EndpointSlices."""
    ns = pool["metadata"]["namespace"]
    ref = pool["spec"]["endpointPickerRef"]
    service = services.get((ns, ref["name"]))
    if service is None or ref.get("kind", "Service") != "Service":
        return []
    port = next((p for p in service["spec"].get("ports") or [] if p["port"] == ref["port"]["number"]), None)
    if port is None:
        return []
    out = []
    for s in slices:
        if s["metadata"].get("namespace") != ns:
            continue
        if (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != ref["name"]:
            continue
        number = next((p.get("port") for p in s.get("ports") or [] if p.get("name", "") == port.get("name", "")), None)
        if number is None:
            continue
        for endpoint in s.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            pod = (endpoint.get("targetRef") or {}).get("name", "")
            out += [(address, int(number), pod) for address in endpoint.get("addresses") or []]
    return sorted(set(out))


def clusters(
    pools: list[JSON],
    services: dict[tuple[str, str], JSON],
    slices: list[JSON],
    plaintext: Callable[[str, str], bool],
) -> list[JSON]:
    """Per InferencePool its ORIGINAL_DST cluster and its EPP's; and the EPP-less default.
    ``plaintext(namespace, pod)`` tells whether that EPP pod serves without TLS."""
    out = [_static(NO_EPP, [])]
    for pool in sorted(pools, key=key):
        ns, name = key(pool)
        out.append({
            "@type": CLUSTER, "name": pool_cluster(ns, name), "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
            "connect_timeout": "5s", "circuit_breakers": LIMITS,
            "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        })  # fmt: skip
        found = epp_addresses(pool, services, slices)
        epp = _static(epp_cluster(ns, name), [(ip, port) for ip, port, _ in found])
        epp["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _T + "extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}}  # fmt: skip
        if not any(plaintext(ns, pod) for _, _, pod in found):
            tls = {"@type": _T + "extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                   "common_tls_context": {"alpn_protocols": ["h2"]}}  # fmt: skip
            epp["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": tls}
        out.append(epp)
    return out


def discovery(resources: list[JSON], version: str) -> JSON:
    """A file of ``path_config_source``: a DiscoveryResponse."""
    return {"version_info": version, "resources": resources}
