"""What one settled object costs at rest: API requests, MLflow and Prometheus calls per minute.

Measures the operator of any checkout the same way, so two versions can be compared::

    .venv/bin/python bench/at_rest.py --source DIR --seconds 120

1. starts a local cluster (``localkube``) in a temporary directory, installs the
   CRDs of ``DIR/crds`` and the Gateway API CRDs;
2. puts a counting HTTP proxy in front of MLflow and one in front of Prometheus
   (127.0.0.1 only), and runs ``python -m slipway`` with ``PYTHONPATH=DIR/operator``
   as a subprocess, with an audited identity (``localkube.audit``) and the proxies'
   URLs;
3. creates the objects of ``tests/integration/test_at_rest.py``: a TrainingRun with
   an artifact (its ModelArtifact follows), and three InferenceDeployments
   (artifactRef Replicas, artifactRef GatewayAPI, following the alias ``candidate``),
   each with an HPA; waits until all five are Ready;
4. waits until settled (10 s without an operator request other than a watch, or
   60 s at most), then counts for ``--seconds``: the operator's API requests from
   the API server's audit log, and its MLflow and Prometheus calls at the proxies;
5. prints a table per object kind and in total, and writes ``result.json``,
   ``table.md`` and the operator's log to the output directory.

The proxies count only the operator's connections: each accepted connection is
matched to its client socket in ``/proc/net/tcp`` and to the operator's open file
descriptors; calls from pods (which are given the same MLflow URL) are counted
apart as ``other``. A benchmark, run by hand (``make bench``): never by ``make test``
or CI.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import sys
import threading
import time
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kubernetes.client.exceptions import ApiException

from bench.harness import (
    GROUP,
    IMAGE,
    ROOT,
    VERSION,
    Operator,
    create_namespace,
    describe,
    git,
    install_crds,
    is_ready,
    local_cluster,
    log,
    log_findings,
    machine,
    operator_env,
    print_log_findings,
    settle,
    source_of,
)
from localkube.audit import AuditRecord, audited_kubeconfig, requests_by, summarize
from localkube.bootstrap import apply_gateway_api_crds
from localkube.kube import Kube

USER = "slipway-bench"
NAMESPACE = "bench"
MODEL = "digits"
SLIPWAY_KINDS = {"trainingruns": "TrainingRun", "modelartifacts": "ModelArtifact",
                 "inferencedeployments": "InferenceDeployment"}  # fmt: skip
KIND_ORDER = ["TrainingRun", "ModelArtifact", "InferenceDeployment"]
COLLECTIONS = "(collections)"
UNATTRIBUTED = "(unattributed)"


# --------------------------------------------------------------------------- counting reverse proxy

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "content-length", "host"}  # fmt: skip


def _hex_addr(ip: str, port: int) -> str:
    """An IPv4 address as ``/proc/net/tcp`` writes it: little-endian hex address, big-endian hex port."""
    return "".join(f"{int(b):02X}" for b in reversed(ip.split("."))) + f":{port:04X}"


def socket_inode(local: tuple[str, int], remote: tuple[str, int]) -> str | None:
    """The inode of the TCP socket bound to ``local`` and connected to ``remote``, from ``/proc/net/tcp``."""
    want = (_hex_addr(*local), _hex_addr(*remote))
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 9 and (fields[1], fields[2]) == want:
            return fields[9]
    return None


def owns_socket(pid: int, inode: str) -> bool:
    target = f"socket:[{inode}]"
    with contextlib.suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(fd.path) == target:
                    return True
    return False


@dataclass
class Call:
    time: datetime
    origin: str
    """``operator`` (a connection of the operator's process) or ``other`` (pods, anyone else)"""
    method: str
    path: str
    query: str
    status: int
    body: str
    """the request body, cut at 2 KiB (for attribution: MLflow searches are POSTs)"""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy: CountingProxy, max_connections: int) -> None:
        self.proxy = proxy
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(timeout=30):  # bounded: a connection waits at most 30 s for a slot
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection gives its slot back after a minute
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.origin = self.server.proxy.classify(self.client_address)
        self.upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        with contextlib.suppress(Exception):
            super().finish()
        if self.upstream is not None:
            self.upstream.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _send_upstream(self, body: bytes | None) -> http.client.HTTPResponse:
        proxy = self.server.proxy
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = proxy.netloc
        if body is not None:
            headers["Content-Length"] = str(len(body))
        for attempt in (1, 2):  # a kept-alive upstream connection may have been closed meanwhile
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(proxy.host, proxy.port, timeout=120)
            try:
                self.upstream.request(self.command, self.path, body=body, headers=headers)
                return self.upstream.getresponse()
            except (OSError, http.client.HTTPException):
                self.upstream.close()
                self.upstream = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _forward(self) -> None:
        body = self._body()
        try:
            response = self._send_upstream(body)
            data = response.read()
            status, reason, headers = response.status, response.reason, response.getheaders()
            if response.will_close and self.upstream is not None:
                self.upstream.close()
                self.upstream = None
        except (OSError, http.client.HTTPException) as exc:
            status, reason, headers, data = 502, "Bad Gateway", [], f"proxy: {exc}".encode()
        self.server.proxy.record(self, body, status)
        self.send_response(status, reason)
        for key, value in headers:
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _forward


class CountingProxy:
    """An HTTP reverse proxy on 127.0.0.1 that records every request (method, path, query) it forwards."""

    def __init__(self, name: str, upstream: str, max_connections: int = 64, keep: int = 200_000) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{name}: only plain http upstreams are proxied, not {upstream!r}")
        self.name = name
        self.host, self.port = parts.hostname, parts.port or 80
        self.netloc = parts.netloc
        self.operator_pid: int | None = None
        self._calls: deque[Call] = deque(maxlen=keep)  # bounded
        self._lock = threading.Lock()
        self._server = _Server(self, max_connections)
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"proxy-{name}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> CountingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def classify(self, client: tuple[str, int]) -> str:
        """``operator`` if the connection's client socket is one of the operator process's descriptors."""
        pid = self.operator_pid
        if pid is None:
            return "other"
        inode = socket_inode((client[0], client[1]), ("127.0.0.1", self._server.server_port))
        return "operator" if inode is not None and owns_socket(pid, inode) else "other"

    def record(self, handler: _Handler, body: bytes | None, status: int) -> None:
        parts = urlsplit(handler.path)
        text = (body or b"")[:2048].decode("utf-8", "replace")
        call = Call(datetime.now(UTC), handler.origin, handler.command, parts.path, parts.query, status, text)
        with self._lock:
            self._calls.append(call)

    def calls(self, since: datetime, until: datetime) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if since <= c.time < until]


# --------------------------------------------------------------------------- the objects (test_at_rest.py)


def training_run() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": "digits"},
        "spec": {
            "model": {"name": MODEL},
            "image": IMAGE,
            "command": ["python", "-m", "slipway.workloads.train"],
            "args": ["--steps", "4"],
            "artifact": {"quantization": {"method": "none"},
                         "validation": {"gates": [{"metric": "accuracy", "min": 0.5}]}, "aliases": ["candidate"]},
        },
    }  # fmt: skip


def inference_deployment(name: str, model: dict[str, Any], port: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": model,
            "image": IMAGE,
            "command": ["python", "-m", "slipway.workloads.serve"],
            "port": port,
            "autoscaling": {"minReplicas": 1, "maxReplicas": 2,
                            "metrics": [{"type": "Pods", "name": "inflight", "targetAverageValue": "0.5"}]},
            **spec,
        },
    }  # fmt: skip


def deployments(port: int) -> list[dict[str, Any]]:
    """The three deployments. Pods of every local cluster on this machine get addresses from the same
    loopback range (127.0.1.x for a first node), so a cluster of concurrent tests may hold 127.0.1.5:8080
    already: the servers here listen on a port of their own."""
    gateway = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}]}
    return [
        inference_deployment("by-ref", {"artifactRef": {"name": "digits"}}, port),
        inference_deployment("by-ref-gw", {"artifactRef": {"name": "digits"}}, port, traffic=gateway),
        inference_deployment("by-alias", {"name": MODEL, "alias": "candidate"}, port),
    ]


OBJECTS = [("TrainingRun", "digits"), ("ModelArtifact", "digits")] + [
    ("InferenceDeployment", name) for name in ("by-ref", "by-ref-gw", "by-alias")
]


def custom_path(kind: str, name: str | None = None) -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{kind.lower()}s"
    return f"{path}/{name}" if name else path


# --------------------------------------------------------------------------- attribution and tables


class Attribution:
    """Which settled object a request concerns: by its own name, or its owner's (ownerReferences, up the chain)."""

    def __init__(self, kube: Kube, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.kube = kube
        self.objects = objects
        self.by_uid = {o["metadata"]["uid"]: key for key, o in objects.items()}
        # ModelArtifacts that deployments name in spec.model.artifactRef: a deployment's pass reads them.
        self.artifact_refs = {
            ((o.get("spec") or {}).get("model") or {}).get("artifactRef", {}).get("name")
            for (kind, _), o in objects.items()
            if kind == "InferenceDeployment"
        } - {None}
        artifacts = [o for (kind, _), o in objects.items() if kind == "ModelArtifact"]
        self.artifact_aliases = {alias for o in artifacts for alias in o["spec"].get("aliases") or ["candidate"]}
        self._cache: dict[str, str] = {}

    def api(self, record: AuditRecord) -> str:
        """The kind of the settled object whose pass made a request; ``(collections)`` for a list or watch.

        A request on a settled object counts for it, except a ``get`` of a ModelArtifact that a
        deployment names in ``artifactRef`` (the deployment resolving its model); a request on a
        child counts for the settled object that owns it (ownerReferences, up the chain), or, for a
        child that does not exist (a ``get`` answered 404), for the object its name starts with.
        """
        if record.name is None or record.resource is None:
            return COLLECTIONS if record.verb in ("list", "watch") else UNATTRIBUTED
        if record.resource in SLIPWAY_KINDS:
            if record.resource == "modelartifacts" and record.verb == "get" and record.name in self.artifact_refs:
                return "InferenceDeployment"
            return SLIPWAY_KINDS[record.resource]
        path = record.uri.split("?", 1)[0]
        if record.subresource:
            path = path.rsplit("/", 1)[0]
        if path not in self._cache:
            kind = self._owner_kind(path)
            if kind == UNATTRIBUTED:
                kinds = {k for k, n in self.objects if record.name.startswith(n + "-")}
                kind = kinds.pop() if len(kinds) == 1 else UNATTRIBUTED
            self._cache[path] = kind
        return self._cache[path]

    def _owner_kind(self, path: str, depth: int = 0) -> str:
        try:
            obj = self.kube.get_or_none(path)
        except ApiException:
            return UNATTRIBUTED
        if obj is None or depth > 4:
            return UNATTRIBUTED
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("uid") in self.by_uid:
                return self.by_uid[ref["uid"]][0]
        for ref in obj["metadata"].get("ownerReferences") or []:  # e.g. a ReplicaSet of a Deployment
            plural = {"Deployment": "deployments", "ReplicaSet": "replicasets", "Job": "jobs"}.get(ref.get("kind"))
            if plural:
                group = "/api/v1" if "/" not in ref["apiVersion"] else f"/apis/{ref['apiVersion']}"
                return self._owner_kind(f"{group}/namespaces/{NAMESPACE}/{plural}/{ref['name']}", depth + 1)
        return UNATTRIBUTED

    def external(self, call: Call) -> str:
        """The kind a MLflow or Prometheus call concerns, when it carries something that names one."""
        text = unquote(call.query) + " " + call.body
        for uid, (kind, _name) in self.by_uid.items():
            if uid in text:
                return kind
        run_id = (
            ((self.objects.get(("TrainingRun", "digits")) or {}).get("status") or {}).get("mlflow", {}).get("runId")
        )
        if run_id and run_id in text:
            return "TrainingRun"
        if call.path.endswith("/registered-models/alias"):
            if call.method == "GET":
                return "InferenceDeployment"  # the alias lookup of a deployment that follows one
            with contextlib.suppress(ValueError, AttributeError):  # a move: an artifact's alias, or production
                alias = (json.loads(call.body) if call.body else parse_qs(call.query)).get("alias")
                alias = alias[0] if isinstance(alias, list) else alias
                return "ModelArtifact" if alias in self.artifact_aliases else "InferenceDeployment"
        params = parse_qs(call.query)
        if "query" in params and any(f'"{n}"' in params["query"][0] for k, n in OBJECTS if k == "InferenceDeployment"):
            return "InferenceDeployment"
        return UNATTRIBUTED


def per_minute(count: float, seconds: float) -> float:
    return count * 60.0 / seconds


def build_result(
    records: list[AuditRecord],
    mlflow: list[Call],
    prometheus: list[Call],
    attribution: Attribution,
    seconds: float,
) -> dict[str, Any]:
    counts = Counter(kind for kind, _ in OBJECTS)
    rows: dict[str, dict[str, Any]] = {}
    groups = [*KIND_ORDER, COLLECTIONS, UNATTRIBUTED]
    api_by_group: dict[str, list[AuditRecord]] = defaultdict(list)
    for r in records:
        api_by_group[attribution.api(r)].append(r)
    ext_by_group: dict[str, dict[str, list[Call]]] = {"mlflow": defaultdict(list), "prometheus": defaultdict(list)}
    for service, calls in (("mlflow", mlflow), ("prometheus", prometheus)):
        for c in calls:
            if c.origin == "operator":
                ext_by_group[service][attribution.external(c)].append(c)

    def by_path(calls: list[Call]) -> dict[str, float]:
        counted = Counter(f"{c.method} {c.path}" for c in calls)
        return {k: per_minute(v, seconds) for k, v in sorted(counted.items())}

    def row(api: list[AuditRecord], ml: list[Call], prom: list[Call], objects: int) -> dict[str, Any]:
        non_watch = [r for r in api if r.verb != "watch"]
        watches = [r for r in api if r.verb == "watch"]
        out: dict[str, Any] = {
            "objects": objects,
            "api_requests": len(non_watch),
            "api_per_min": per_minute(len(non_watch), seconds),
            "api_by_verb_resource_per_min": {k: per_minute(v, seconds) for k, v in summarize(non_watch).items()},
            "watches_started": len(watches),
            "watches_by_resource": summarize(watches),
            "mlflow_calls": len(ml),
            "mlflow_per_min": per_minute(len(ml), seconds),
            "mlflow_by_path_per_min": by_path(ml),
            "prometheus_calls": len(prom),
            "prometheus_per_min": per_minute(len(prom), seconds),
            "prometheus_by_path_per_min": by_path(prom),
        }
        if objects:
            for key in ("api", "mlflow", "prometheus"):
                out[f"{key}_per_min_per_object"] = out[f"{key}_per_min"] / objects
        return out

    for group in groups:
        api, ml, prom = (
            api_by_group.get(group, []),
            ext_by_group["mlflow"].get(group, []),
            ext_by_group["prometheus"].get(group, []),
        )
        if group in KIND_ORDER or api or ml or prom:
            rows[group] = row(api, ml, prom, counts.get(group, 0))
    op_ml = [c for c in mlflow if c.origin == "operator"]
    op_prom = [c for c in prometheus if c.origin == "operator"]
    rows["total"] = row(records, op_ml, op_prom, len(OBJECTS))
    return {
        "rows": rows,
        "other_origin": {
            "mlflow_calls": sum(1 for c in mlflow if c.origin != "operator"),
            "prometheus_calls": sum(1 for c in prometheus if c.origin != "operator"),
        },
    }


def fmt(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def render_table(result: dict[str, Any], seconds: float) -> str:
    lines = [
        f'Window {seconds:.0f} s. Per minute; "per object" divides by the settled objects of that kind. '
        "API requests exclude watches (listed apart).",
        "",
        "| object kind | objects | API req/min | per object | MLflow calls/min | per object "
        "| Prometheus calls/min | per object |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for group, row in result["rows"].items():
        n = row["objects"]
        per = {key: fmt(row[f"{key}_per_min_per_object"]) if n else "-" for key in ("api", "mlflow", "prometheus")}
        name = f"**{group}**" if group == "total" else group
        lines.append(
            f"| {name} | {n or '-'} | {fmt(row['api_per_min'])} | {per['api']} | {fmt(row['mlflow_per_min'])} | "
            f"{per['mlflow']} | {fmt(row['prometheus_per_min'])} | {per['prometheus']} |"
        )
    lines += [
        "",
        "API requests/min by verb and resource:",
        "",
        "| object kind | verb resource | req/min |",
        "|---|---|---:|",
    ]
    for group, row in result["rows"].items():
        if group == "total":
            continue
        for key, value in row["api_by_verb_resource_per_min"].items():
            lines.append(f"| {group} | `{key}` | {fmt(value)} |")
    total = result["rows"]["total"]
    lines.append(f"| **total** | | {fmt(total['api_per_min'])} |")
    watches = total["watches_by_resource"]
    lines += ["", "Watches started in the window: " + (", ".join(f"`{k}` {v}" for k, v in watches.items()) or "none")]
    for service in ("mlflow", "prometheus"):
        by_path = total[f"{service}_by_path_per_min"]
        label = "MLflow" if service == "mlflow" else "Prometheus"
        lines.append(
            f"{label} calls/min by path: " + (", ".join(f"`{k}` {fmt(v)}" for k, v in by_path.items()) or "none")
        )
    other = result["other_origin"]
    lines.append(f"Calls through the proxies from other processes (pods): MLflow {other['mlflow_calls']}, "
                 f"Prometheus {other['prometheus_calls']}")  # fmt: skip
    return "\n".join(lines)


# --------------------------------------------------------------------------- the run


def wait_ready(kube: Kube, operator: Operator, timeout: float) -> float:
    start = time.monotonic()
    last: dict[tuple[str, str], dict[str, Any] | None] = {}

    def check() -> bool:
        if not operator.alive():
            raise SystemExit(
                f"the operator exited (code {operator.proc and operator.proc.returncode}): see {operator.log_path}"
            )
        for kind, name in OBJECTS:
            last[(kind, name)] = kube.get_or_none(custom_path(kind, name))
        return all(o is not None and is_ready(o) for o in last.values())

    while not check():
        if time.monotonic() - start > timeout:
            states = "; ".join(f"{k} {n}: {describe(o)}" for (k, n), o in last.items())
            raise TimeoutError(f"not every object Ready within {timeout:.0f} s: {states}")
        time.sleep(2)
    return time.monotonic() - start


def run(args: argparse.Namespace) -> dict[str, Any]:
    source = source_of(args.source)
    commit = git(source, "rev-parse", "HEAD")
    label = args.label or (commit[:7] if commit else source.name)
    out = (args.out or ROOT / "bench" / "out" / f"at-rest-{datetime.now():%Y%m%d-%H%M%S}-{label}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    extra_env = dict(item.split("=", 1) for item in args.env)
    log(f"source {source} ({label}), output {out}")
    result: dict[str, Any] = {
        "benchmark": "at_rest",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": str(source),
        "commit": commit,
        "commit_subject": git(source, "log", "-1", "--format=%s"),
        "source_dirty": git(source, "status", "--porcelain", "--", "operator", "crds").splitlines(),
        "bench_commit": git(ROOT, "rev-parse", "HEAD"),
        "machine": machine(),
        "seconds": args.seconds,
    }
    proxies: list[CountingProxy] = []
    operator: Operator | None = None
    try:
        with local_cluster(args.keep_cluster_dir) as info:
            try:
                admin = Kube(info.kubeconfig)
                install_crds(admin, source / "crds")
                apply_gateway_api_crds(admin)
                create_namespace(admin, NAMESPACE)

                mlflow = CountingProxy("mlflow", info.mlflow_url).start()
                prometheus = CountingProxy("prometheus", info.prometheus_url).start()
                proxies += [mlflow, prometheus]
                kubeconfig = audited_kubeconfig(info, USER)
                env = operator_env(source, kubeconfig, mlflow.url, prometheus.url, extra_env)
                operator = Operator(source, env, NAMESPACE, out / "operator.log")
                result["slipway_imported_from"] = operator.check_import()
                log(f"the operator imports {result['slipway_imported_from']}")
                result["operator_env"] = {
                    k: v for k, v in env.items() if k.startswith("SLIPWAY_") or k in ("PYTHONPATH",)
                }
                operator.start()
                for proxy in proxies:
                    proxy.operator_pid = operator.pid

                admin.create(custom_path("TrainingRun"), training_run())
                result["serving_port"] = port = random.randint(20000, 29999)
                for body in deployments(port):
                    admin.create(custom_path("InferenceDeployment"), body)
                result["ready_seconds"] = round(wait_ready(admin, operator, args.ready_timeout), 1)
                log(f"all {len(OBJECTS)} objects Ready after {result['ready_seconds']} s")

                result["settle"] = settle(info, USER, args.quiet_seconds, args.settle_max_seconds)
                log(f"settle: {result['settle']}; counting for {args.seconds:.0f} s")
                result["load_average_before"] = os.getloadavg()
                start = datetime.now(UTC)
                end = start + timedelta(seconds=args.seconds)
                while datetime.now(UTC) < end + timedelta(seconds=1):  # and a second for the last events to land
                    if not operator.alive():
                        raise SystemExit(f"the operator exited during the window: see {operator.log_path}")
                    time.sleep(1)
                result["load_average_after"] = os.getloadavg()
                records = requests_by(info, USER, start, end)
                objects = {(k, n): admin.get(custom_path(k, n)) for k, n in OBJECTS}
                still_ready = {f"{k}/{n}": is_ready(o) for (k, n), o in objects.items()}
                attribution = Attribution(admin, objects)
                result["window"] = {"start": start.isoformat(), "end": end.isoformat()}
                result["still_ready_after"] = still_ready
                result.update(
                    build_result(
                        records, mlflow.calls(start, end), prometheus.calls(start, end), attribution, args.seconds
                    )
                )
                for service, proxy in (("mlflow", mlflow), ("prometheus", prometheus)):
                    everything = proxy.calls(datetime.min.replace(tzinfo=UTC), datetime.now(UTC))
                    result[f"{service}_calls_whole_run_by_origin"] = dict(Counter(c.origin for c in everything))
                    calls = proxy.calls(start, end)[:2000]
                    result[f"{service}_calls"] = [asdict(c) | {"time": c.time.isoformat()} for c in calls]
                result["api_requests"] = [
                    {
                        "time": r.time.isoformat(),
                        "key": r.key,
                        "name": r.name,
                        "code": r.code,
                        "object": attribution.api(r),
                    }
                    for r in records[:5000]
                ]
            finally:
                if operator is not None:
                    operator.stop()
                for proxy in proxies:
                    proxy.stop()
    finally:
        if operator is not None:
            result["operator_log"] = log_findings(operator.log_path)
        (out / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    table = render_table(result, args.seconds)
    header = (f"{label} ({result['commit_subject']})" if commit else label) + f", {result['date']}"
    (out / "table.md").write_text(f"{header}\n\n{table}\n")
    print(f"\n{header}\n\n{table}\n")
    print_log_findings(result.get("operator_log", {}), out / "operator.log")
    print(f"written: {out / 'result.json'}, {out / 'table.md'}")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--source", type=Path, default=ROOT, help="a checkout whose operator/ holds the slipway package to measure"
    )
    p.add_argument("--seconds", type=float, default=120.0, help="length of the counting window")
    p.add_argument("--label", help="name of this run in the output (default: the source's short commit)")
    p.add_argument("--out", type=Path, help="output directory (default: bench/out/at-rest-<time>-<label>)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment for the operator")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds for every object to become Ready")
    p.add_argument("--quiet-seconds", type=float, default=10.0, help="settled: this long without a non-watch request")
    p.add_argument("--settle-max-seconds", type=float, default=60.0, help="start counting after this long anyway")
    p.add_argument("--keep-cluster-dir", action="store_true", help="keep the stopped cluster's directory (logs)")
    args = p.parse_args(argv)
    if any("=" not in item for item in args.env):
        p.error("--env takes KEY=VALUE")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
