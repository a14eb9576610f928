"""The kubelet API of a localkube node, over TLS on the node's address and port
(``status.daemonEndpoints.kubeletEndpoint``): what ``kubectl logs``, ``kubectl top`` and
metrics-server ask a kubelet for.

- ``GET /containerLogs/{namespace}/{pod}/{container}`` with ``follow``, ``tailLines``,
  ``sinceSeconds``, ``sinceTime``, ``timestamps``, ``previous`` and ``limitBytes``, as the
  kube-apiserver forwards ``pods/log``;
- ``GET /metrics/resource``: per-container and per-pod CPU seconds and working-set bytes
  measured from each container's process tree in ``/proc``, and the node's totals (the sum
  of its pods and the agent itself), in the text format metrics-server decodes;
- ``GET /healthz``.

Clients authenticate with a certificate from the cluster CA; only the identities in
``ALLOWED`` (the kube-apiserver's kubelet client, metrics-server) or ``system:masters``
may read. A real kubelet asks the API server (SubjectAccessReview); this fixed list is
the local cluster's stand-in.
"""

from __future__ import annotations

import datetime
import logging
import os
import select
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from localkube.nodeagent import logs

log = logging.getLogger(__name__)

JSON = dict[str, Any]
ALLOWED = {"kube-apiserver-kubelet-client", "system:metrics-server"}
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class ContainerView:
    """What the kubelet API needs to know of one container of a pod on this node."""

    namespace: str
    pod: str
    container: str
    run_dir: Path
    pid: int | None  # the running instance's process (its session), if it runs
    started_at: str = ""


class NotFound(Exception):
    pass


# -- /proc ----------------------------------------------------------------------------------
def session_usage(sid: int) -> tuple[float, int]:
    """CPU seconds (user + system, reaped children included) and resident bytes of every
    process in session ``sid``: a container's process tree (it starts its own session)."""
    cpu_ticks = 0
    rss_pages = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[3]) != sid:  # field 6, session
                continue
            cpu_ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
            rss_pages += int(fields[21])
        except (OSError, ValueError, IndexError):
            continue
    return cpu_ticks / CLK_TCK, rss_pages * PAGE


def own_usage() -> tuple[float, int]:
    t = os.times()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * PAGE
    return t.user + t.system, rss


def _epoch(rfc3339: str) -> float:
    try:
        return datetime.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return 0.0


def resource_metrics(containers: list[ContainerView]) -> str:
    """The kubelet's ``/metrics/resource`` for the running containers."""
    ms = int(time.time() * 1000)
    lines = {
        "container_cpu_usage_seconds_total": [],
        "container_memory_working_set_bytes": [],
        "container_start_time_seconds": [],
        "pod_cpu_usage_seconds_total": [],
        "pod_memory_working_set_bytes": [],
    }
    pods: dict[tuple[str, str], list[float]] = {}
    node_cpu, node_mem = own_usage()
    for c in containers:
        if c.pid is None:
            continue
        cpu, mem = session_usage(c.pid)
        if mem == 0:
            continue  # exited between listing and reading
        labels = f'container="{c.container}",namespace="{c.namespace}",pod="{c.pod}"'
        lines["container_cpu_usage_seconds_total"].append(f"{{{labels}}} {cpu:.6f} {ms}")
        lines["container_memory_working_set_bytes"].append(f"{{{labels}}} {mem} {ms}")
        lines["container_start_time_seconds"].append(f"{{{labels}}} {_epoch(c.started_at):.3f} {ms}")
        total = pods.setdefault((c.namespace, c.pod), [0.0, 0])
        total[0] += cpu
        total[1] += mem
        node_cpu += cpu
        node_mem += mem
    for (ns, pod), (cpu, mem) in sorted(pods.items()):
        lines["pod_cpu_usage_seconds_total"].append(f'{{namespace="{ns}",pod="{pod}"}} {cpu:.6f} {ms}')
        lines["pod_memory_working_set_bytes"].append(f'{{namespace="{ns}",pod="{pod}"}} {mem} {ms}')
    kinds = {
        "container_cpu_usage_seconds_total": "counter",
        "container_memory_working_set_bytes": "gauge",
        "container_start_time_seconds": "gauge",
        "pod_cpu_usage_seconds_total": "counter",
        "pod_memory_working_set_bytes": "gauge",
    }
    out = [
        "# TYPE node_cpu_usage_seconds_total counter",
        f"node_cpu_usage_seconds_total {node_cpu:.6f} {ms}",
        "# TYPE node_memory_working_set_bytes gauge",
        f"node_memory_working_set_bytes {node_mem} {ms}",
    ]
    for name, samples in lines.items():
        out.append(f"# TYPE {name} {kinds[name]}")
        out += [name + s for s in samples]
    out += ["# TYPE scrape_error gauge", "scrape_error 0"]
    return "\n".join(out) + "\n"


# -- the server -----------------------------------------------------------------------------
class KubeletAPI:
    """Serves the kubelet API for one node; ``lookup`` and ``running`` come from the agent."""

    def __init__(
        self,
        port: int,
        cert: Path,
        key: Path,
        ca: Path,
        lookup: Callable[[str, str, str], ContainerView],
        running: Callable[[], list[ContainerView]],
        host: str = "127.0.0.1",
    ) -> None:
        self.lookup = lookup
        self.running = running
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        api = self

        class Handler(_Handler):
            kubelet = api

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.server.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="kubelet-api", daemon=True).start()
        log.info("kubelet API on https://127.0.0.1:%d", self.port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    kubelet: KubeletAPI
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(30)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError) as e:
            log.info("kubelet API: TLS handshake with %s failed: %s", self.client_address[0], e)
            raise
        self.request.settimeout(None)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("kubelet API: " + format, *args)

    def _identity(self) -> tuple[str, list[str]]:
        cert = self.request.getpeercert() or {}
        cn, orgs = "", []
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    cn = value
                elif key == "organizationName":
                    orgs.append(value)
        return cn, orgs

    def _send(self, code: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._send(200, "ok")
            return
        cn, orgs = self._identity()
        if cn not in ALLOWED and "system:masters" not in orgs:
            self._send(403, f"Forbidden (user={cn}, verb=get, resource=nodes, subresource=proxy)")
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        try:
            if url.path == "/metrics/resource":
                self._send(200, resource_metrics(self.kubelet.running()), "text/plain; version=0.0.4")
            elif parts[0] == "containerLogs" and len(parts) == 4:
                self._logs(parts[1], parts[2], parts[3], query)
            else:
                self._send(404, "404 page not found")
        except NotFound as e:
            self._send(404, str(e))
        except ValueError as e:
            self._send(400, str(e))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _logs(self, namespace: str, pod: str, container: str, q: dict[str, str]) -> None:
        view = self.kubelet.lookup(namespace, pod, container)
        files = logs.instances(view.run_dir, container)
        previous = q.get("previous") in ("true", "1")
        if previous:
            if len(files) < 2:
                raise NotFound(f'previous terminated container "{container}" in pod "{pod}" not found')
            path = files[-2]
        elif files:
            path = files[-1]
        else:
            raise NotFound(f'container "{container}" in pod "{pod}" is waiting to start: no logs yet')
        since = None
        if "sinceSeconds" in q:
            since = time.time() - int(q["sinceSeconds"])
        elif "sinceTime" in q:
            since = logs.parse_time(q["sinceTime"])
        follow = q.get("follow") in ("true", "1") and not previous

        def running() -> bool:
            current = self.kubelet.lookup(namespace, pod, container)
            return current.pid is not None and logs.instances(current.run_dir, container)[-1] == path

        chunks = logs.read(
            path,
            tail_lines=int(q["tailLines"]) if "tailLines" in q else None,
            since=since,
            timestamps=q.get("timestamps") in ("true", "1"),
            limit_bytes=int(q["limitBytes"]) if "limitBytes" in q else None,
            follow=follow,
            running=running,
            stopped=self._client_gone,
        )
        self._stream(chunks)

    def _client_gone(self) -> bool:
        """The client sends nothing while it reads a response: readable means it closed."""
        readable, _, _ = select.select([self.request], [], [], 0)
        return bool(readable)

    def _stream(self, chunks: Iterator[bytes]) -> None:
        """Chunked transfer: each line reaches ``kubectl logs -f`` as it is written."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            if chunk:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
