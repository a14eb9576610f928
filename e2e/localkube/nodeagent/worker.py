"""One thread per pod: run its init containers to completion in order, then set up, run
and supervise its first container, report status, apply the restart policy with
back-off, and carry out graceful deletion."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from localkube.kube import Kube
from localkube.nodeagent import envvars, images, logs, portmap, runtime, volumes
from localkube.nodeagent.ipam import IPAM
from localkube.nodeagent.probes import Prober
from localkube.nodeagent.status import ContainerStatus, PodStatus, other_containers
from localkube.nodeagent.tracking import Tracker

log = logging.getLogger(__name__)

PUBLISH_RETRY_SECONDS = (0.5, 1.0, 2.0, 4.0, 5.0)  # then every 5 s while the API server is away

JSON = dict[str, Any]
MAX_BACKOFF = 300.0
BACKOFF_RESET_AFTER = 600.0
TERMINATION_LOG_LINES = 80


@dataclass
class Outcome:
    """How a container run ended."""

    exit_code: int
    reason: str
    message: str = ""


@dataclass(frozen=True)
class NodeContext:
    """What the node agent shares with each of its pod workers."""

    kube: Kube
    pods_dir: Path
    ipam: IPAM
    tracker: Tracker
    allocatable: dict[str, str]  # the node's, for resourceFieldRef without limits
    restart_backoff: float
    workload_bin: Path  # first on every container's PATH
    api_host: str  # the API server's real address, as containers reach it
    api_port: str
    forget: Callable[[str], None]  # called with the pod's uid when its worker ends

    def base_env(self, pod_ip: str, home: Path, hostname: str) -> dict[str, str]:
        """Variables every container gets; the API server is reached on its real address."""
        port = self.api_port or "443"
        return {
            "PATH": f"{self.workload_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(home),
            "HOSTNAME": hostname,
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": self.api_host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{self.api_host}:{port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://{self.api_host}:{port}",
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_ADDR": self.api_host,
            "KUBERNETES_PORT_443_TCP_PORT": port,
        }


class PodWorker(threading.Thread):
    """Runs one pod bound to this node until it is deleted."""

    def __init__(self, node: NodeContext, pod: JSON) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.node = node
        self.kube = node.kube
        self.pod = pod
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.pod_dir = node.pods_dir / f"{self.ns}_{self.pod_name}"
        self.run_dir = self.pod_dir / self.uid
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.gone = False  # the API object is deleted
        self.shutting_down = False  # the agent stops: kill, report nothing
        self.halted = threading.Event()  # set with either of the two above: ends any retry wait
        self.container: runtime.ContainerProcess | None = None
        self.running_container = ""  # the name of the container whose process is self.container
        self.volumes: volumes.PodVolumes | None = None
        self._published: JSON | None = None
        self._crashes = 0
        self.relays: list[portmap.Relay] = []

    # -- called from the agent's watch thread ----------------------------------
    def update(self, pod: JSON) -> None:
        with self.lock:
            self.pod = pod
        self.wake.set()

    def deleted(self) -> None:
        self.gone = True
        self.halted.set()
        self.wake.set()

    def shutdown(self) -> None:
        self.shutting_down = True
        self.halted.set()
        self.wake.set()

    # -- helpers -----------------------------------------------------------------
    @property
    def spec(self) -> JSON:
        return self.pod["spec"]

    @property
    def container_spec(self) -> JSON:
        return self.spec["containers"][0]

    def stopping(self) -> bool:
        return self.gone or self.shutting_down or bool(self.pod["metadata"].get("deletionTimestamp"))

    def sleep(self, seconds: float) -> None:
        """Wait up to ``seconds`` or until something happens to the pod."""
        self.wake.wait(max(seconds, 0))
        self.wake.clear()

    def publish(self) -> None:
        """Patch the pod's status if it changed (strategic merge, as the kubelet does). While the API
        server cannot be reached (or answers 5xx) the status is kept and sent again with back-off
        until it lands: a pod that finished during an outage is reported once the server is back."""
        delays = iter(PUBLISH_RETRY_SECONDS)
        while not (self.gone or self.shutting_down):
            status = self.status.to_dict()
            if status == self._published:
                return
            try:
                self.kube.patch(f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}/status", {"status": status})
                self._published = status
                return
            except ApiException as e:
                if e.status == 404:
                    self.gone = True
                    return
                if e.status is not None and e.status < 500:
                    log.warning("%s: status update refused: %s %s", self.name, e.status, e.body)
                    return
                failure = f"{e.status} {e.reason}"
            except (urllib3.exceptions.HTTPError, OSError) as e:
                failure = str(e)
            delay = next(delays, PUBLISH_RETRY_SECONDS[-1])
            log.warning("%s: status update failed (%s); again in %.0fs", self.name, failure, delay)
            self.halted.wait(delay)

    # -- lifecycle ---------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("%s: worker failed", self.name)
            if self.container:
                self.container.stop(0)
        finally:
            self.node.forget(self.uid)

    def _run(self) -> None:
        previous = self.pod.get("status", {})
        c = self.container_spec
        cs = ContainerStatus(name=c["name"], image=c.get("image", ""))
        init = [ContainerStatus(name=i["name"], image=i.get("image", "")) for i in self.spec.get("initContainers", [])]
        self.status = PodStatus(container=cs, others=other_containers(self.pod), init=init)
        self.status.start_time = previous.get("startTime") or self.status.start_time
        self._adopt_previous(previous)
        if self.status.phase in ("Succeeded", "Failed"):
            self._finish()
            return
        # hostNetwork pods share the host's address; all others get their own.
        self.status.pod_ip = "127.0.0.1" if self.spec.get("hostNetwork") else self.node.ipam.allocate(self.uid)
        self.publish()
        sidecars = [i["name"] for i in self.spec.get("initContainers", []) if i.get("restartPolicy") == "Always"]
        if sidecars:
            self._refuse("SidecarContainersNotSupported", f"localkube does not run sidecar containers: {sidecars}")
        initialized = self._initialize()
        if self.status.phase == "Failed":
            self._finish()
            return
        while initialized and not self.stopping():
            outcome = self._run_once(self.container_spec, cs)
            if outcome is None:
                break
            if not self._after_exit(outcome):
                self._finish()
                return
        self._terminate()

    def _initialize(self) -> bool:
        """Run each init container to success, in order, before the first container (as the
        kubelet does: a failed one is run again with back-off, or fails the pod under
        ``restartPolicy: Never``). False if the pod failed or is going away first."""
        if not self.status.init or all(i.completed() for i in self.status.init):
            return True
        self.status.container.waiting("PodInitializing")
        for spec, cs in zip(self.spec["initContainers"], self.status.init, strict=True):
            while not cs.completed():
                if self.stopping():
                    return False
                outcome = self._run_once(spec, cs, probes=False)
                if outcome is None:
                    return False
                cs.terminated(outcome.exit_code, outcome.reason, outcome.message)
                self.node.tracker.forget(self.uid)
                if outcome.exit_code == 0:
                    self.publish()
                    break
                if self.spec.get("restartPolicy", "Always") == "Never":
                    self.status.phase = "Failed"
                    return False
                self._back_off(cs)
                cs.restart_count += 1
        self.status.container.waiting("PodInitializing")
        return True

    def _adopt_previous(self, previous: JSON) -> None:
        """Pick up the status of a pod an earlier agent ran (its processes were killed on start)."""
        old_init = {s["name"]: s for s in previous.get("initContainerStatuses", [])}
        for init in self.status.init:
            if init.name in old_init:  # a completed one stays completed; one that ran is run again
                init.restart_count = old_init[init.name].get("restartCount", 0)
                if "terminated" in old_init[init.name].get("state", {}):
                    init.state = old_init[init.name]["state"]
        cs = self.status.container
        old = next((s for s in previous.get("containerStatuses", []) if s["name"] == cs.name), None)
        self.status.phase = previous.get("phase", "Pending")
        if not old:
            return
        cs.restart_count = old.get("restartCount", 0)
        cs.last_state = old.get("lastState", {})
        cs.container_id = old.get("containerID", "")
        if "running" in old.get("state", {}) and self.status.phase not in ("Succeeded", "Failed"):
            cs.state = old["state"]
            cs.terminated(137, "Error", "container killed: the node agent restarted")
            self.status.pod_ip = previous.get("podIP", "")
            self._after_exit(Outcome(137, "Error"))
        elif "terminated" in old.get("state", {}):
            cs.state = old["state"]

    def _run_once(self, c: JSON, cs: ContainerStatus, probes: bool = True) -> Outcome | None:
        """Set up and run container ``c`` once; None if the pod is going away."""
        while not self.stopping():
            try:
                argv, env, mounts = self._prepare(c)
                break
            except envvars.ConfigError as e:
                cs.waiting(e.reason, str(e))
                self.publish()
                self.sleep(2)
            except ApiException as e:
                cs.waiting("ContainerCreating", f"API error {e.status}: {e.reason}")
                self.publish()
                self.sleep(2)
        else:
            return None
        self.status.sandbox_ready = True
        if not argv:
            self._refuse("NoCommand", "localkube runs the container's command and args; none are set (no images here)")
            return None
        unbuilt = images.unbuilt(argv)
        if unbuilt:
            self._refuse("ErrImageNeverPull", unbuilt)
            return None
        argv = self._map_ports(argv)
        self.container = runtime.start(
            name=f"{self.ns}/{self.pod_name}/{c['name']}",
            argv=argv,
            env=env,
            cwd=c.get("workingDir") or str(self._workdir()),
            hostname=self.spec.get("hostname") or self.pod_name,
            mounts=mounts,
            run_dir=self.run_dir,
            log=logs.instance_path(self.run_dir, c["name"], cs.restart_count),
            on_exit=self.wake.set,
        )
        self.running_container = c["name"]
        self.node.tracker.record(self.uid, self.container.proc, f"{self.ns}/{self.pod_name}")
        log.info(
            "%s: started %s %s (pid %d) on %s", self.name, c["name"], argv[0], self.container.pid, self.status.pod_ip
        )
        cs.running(self.container.pid)
        if probes:  # the first container, not an init container: the pod runs
            self.status.phase = "Running"
            return self._supervise(env)
        return self._await_exit(c, cs)

    def _map_ports(self, argv: list[str]) -> list[str]:
        """The ports an image's program would take on every address, moved and relayed
        (:mod:`localkube.nodeagent.portmap`); the relays end with the container."""
        self._close_relays()
        flags = images.WILDCARD_PORTS.get(argv[0])
        if not flags:
            return argv
        argv, mapping = portmap.remap(argv, flags)
        self.relays = [portmap.Relay(self.status.pod_ip, port, to) for port, to in mapping.items()]
        return argv

    def _close_relays(self) -> None:
        for relay in self.relays:
            relay.close()
        self.relays = []

    def _await_exit(self, c: JSON, cs: ContainerStatus) -> Outcome | None:
        """Wait for an init container (no probes) to exit; None if the pod is going away."""
        assert self.container is not None
        self.publish()
        while not self.stopping():
            code = self.container.exit_code()
            if code is not None:
                return self._outcome(code, c, cs)
            self.sleep(5)
        return None

    def _workdir(self) -> Path:
        work = self.run_dir / "work"
        work.mkdir(parents=True, exist_ok=True)
        return work

    def _prepare(self, c: JSON) -> tuple[list[str], dict[str, str], list[JSON]]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # The downward API must see the pod IP before the API object does.
        pod = dict(self.pod, status=dict(self.pod.get("status", {}), **self._ip_fields()))
        builder = volumes.VolumeBuilder(self.kube, pod, self.run_dir, self.node.allocatable)
        env = envvars.build_env(
            pod,
            c,
            self.node.base_env(self.status.pod_ip, self._workdir(), self.spec.get("hostname") or self.pod_name),
            lambda ns, name: builder.get("configmaps", name),
            lambda ns, name: builder.get("secrets", name),
            self.node.allocatable,
        )
        self.volumes = builder.build()
        self._volume_builder = builder
        mounts = volumes.mounts(c, self.volumes)
        mounts += self._pod_files(c)
        return envvars.command_line(c, env), env, mounts

    def _ip_fields(self) -> JSON:
        ip = self.status.pod_ip
        return {"podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}]}

    def _pod_files(self, c: JSON) -> list[JSON]:
        """/etc/hosts, /etc/hostname and the termination-message file, as the kubelet provides them."""
        hostname = self.spec.get("hostname") or self.pod_name
        etc = self.run_dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(
            f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{self.status.pod_ip}\t{hostname}\n"
        )
        (etc / "hostname").write_text(hostname + "\n")
        term = self.run_dir / "termination-log"
        term.write_text("")
        return [
            {"source": str(etc / "hosts"), "target": "/etc/hosts", "readOnly": False},
            {"source": str(etc / "hostname"), "target": "/etc/hostname", "readOnly": False},
            {
                "source": str(term),
                "target": c.get("terminationMessagePath") or "/dev/termination-log",
                "readOnly": False,
            },
        ]

    def _supervise(self, env: dict[str, str]) -> Outcome | None:
        """Watch the running container: probes, token refresh, exit, deletion. As the kubelet does,
        a startup probe holds the other two back until it succeeds, and kills the container
        once it has failed ``failureThreshold`` times in a row."""
        assert self.container is not None
        c = self.container_spec
        cs = self.status.container
        startup = Prober(c["startupProbe"], time.monotonic(), result=False) if c.get("startupProbe") else None
        readiness: Prober | None = None
        liveness: Prober | None = None

        def arm() -> None:
            nonlocal readiness, liveness
            now = time.monotonic()
            readiness = Prober(c["readinessProbe"], now, result=False) if c.get("readinessProbe") else None
            liveness = Prober(c["livenessProbe"], now, result=True) if c.get("livenessProbe") else None
            cs.started = True
            cs.ready = readiness is None

        if startup is None:
            arm()
        else:
            cs.started = cs.ready = False
        self.publish()
        while True:
            if self.stopping():
                return None
            code = self.container.exit_code()
            if code is not None:
                return self._outcome(code, c, cs)
            now = time.monotonic()
            pid = self.container.pid
            if startup and not startup.result and startup.due(now):
                startup.run(self.status.pod_ip, c, pid, env)
                if startup.result:
                    arm()
                    self.publish()
                elif startup.failures >= int(startup.probe.get("failureThreshold", 3)):
                    log.info("%s: startup probe failed, killing the container", self.name)
                    code = self.container.stop(self._grace(c["startupProbe"]))
                    return Outcome(code, "Error", "startup probe failed")
            if readiness and readiness.due(now) and readiness.run(self.status.pod_ip, c, pid, env):
                cs.ready = readiness.result
                self.publish()
            if liveness and liveness.due(now):
                liveness.run(self.status.pod_ip, c, pid, env)
                if not liveness.result:
                    log.info("%s: liveness probe failed, killing the container", self.name)
                    code = self.container.stop(self._grace(c["livenessProbe"]))
                    return Outcome(code, "Error", "liveness probe failed")
            refresh = self.volumes.next_refresh() if self.volumes else None
            if refresh is not None and now >= refresh:
                self._refresh_tokens()
            probers = [p for p in (readiness, liveness) if p] + ([startup] if startup and not startup.result else [])
            deadlines = [p.next_at for p in probers] + ([refresh] if refresh else [])
            self.sleep(min([*deadlines, now + 5]) - time.monotonic())

    def _refresh_tokens(self) -> None:
        assert self.volumes is not None
        for token in self.volumes.tokens:
            if time.monotonic() >= token.refresh_at:
                try:
                    self._volume_builder.refresh_token(token)
                except ApiException as e:
                    log.warning("%s: token refresh failed: %s", self.name, e.status)
                    token.refresh_at = time.monotonic() + 10

    def _refuse(self, reason: str, message: str) -> None:
        """Keep the container waiting with ``reason`` until the pod is deleted."""
        self.status.container.waiting(reason, message)
        self.publish()
        while not self.stopping():
            self.sleep(60)

    def _outcome(self, code: int, c: JSON, cs: ContainerStatus) -> Outcome:
        assert self.container is not None
        log.info("%s: %s (pid %d) exited with %d", self.name, c["name"], self.container.pid, code)
        self.container.stop(0)  # reap the rest of the process group
        start_error = self.container.start_error()
        if start_error:
            return Outcome(128, "StartError", start_error)
        message = self._termination_message(code, c, cs)
        return Outcome(code, "Completed" if code == 0 else "Error", message)

    def _termination_message(self, code: int, c: JSON, cs: ContainerStatus) -> str:
        try:
            message = (self.run_dir / "termination-log").read_text()[-4096:]
        except OSError:
            message = ""
        if not message and code != 0 and c.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            lines = logs.text_lines(logs.instance_path(self.run_dir, c["name"], cs.restart_count))
            message = "\n".join(lines[-TERMINATION_LOG_LINES:])[-2048:]
        return message

    def _after_exit(self, outcome: Outcome) -> bool:
        """Record the exit; apply the restart policy. False if the pod is now finished."""
        cs = self.status.container
        if "terminated" not in cs.state:
            cs.terminated(outcome.exit_code, outcome.reason, outcome.message)
        self.node.tracker.forget(self.uid)
        policy = self.spec.get("restartPolicy", "Always")
        if policy == "Never" or (policy == "OnFailure" and outcome.exit_code == 0):
            self.status.phase = "Succeeded" if outcome.exit_code == 0 else "Failed"
            return False
        self._back_off(cs)
        cs.restart_count += 1
        return True

    def _back_off(self, cs: ContainerStatus) -> None:
        """CrashLoopBackOff before ``cs`` runs again: none after the first exit, then doubling."""
        ran = time.monotonic() - self.container.started_mono if self.container else 0
        if ran >= BACKOFF_RESET_AFTER:
            self._crashes = 0
        delay = 0.0 if self._crashes == 0 else min(self.node.restart_backoff * 2 ** (self._crashes - 1), MAX_BACKOFF)
        self._crashes += 1
        cs.last_state = cs.state
        if delay > 0:
            cs.waiting(
                "CrashLoopBackOff",
                f"back-off {delay:g}s restarting failed container={cs.name} pod={self.pod_name}_{self.ns}({self.uid})",
            )
            self.publish()
            deadline = time.monotonic() + delay
            while not self.stopping() and time.monotonic() < deadline:
                self.sleep(deadline - time.monotonic())

    def _grace(self, probe: JSON | None = None) -> float:
        if probe and probe.get("terminationGracePeriodSeconds") is not None:
            return float(probe["terminationGracePeriodSeconds"])
        meta = self.pod["metadata"]
        if meta.get("deletionGracePeriodSeconds") is not None:
            return float(meta["deletionGracePeriodSeconds"])
        return float(self.spec.get("terminationGracePeriodSeconds", 30))

    def _pre_stop(self, started: float) -> None:
        """As the kubelet does: the container's ``lifecycle.preStop.sleep`` runs before SIGTERM, the
        process still running, within the grace period (which counts from ``started``)."""
        sleep = ((self.container_spec.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}
        seconds = float(sleep.get("seconds") or 0)
        if seconds <= 0 or self.shutting_down:
            return
        log.info("%s: preStop: sleeping %gs", self.name, seconds)
        while self.container and self.container.exit_code() is None and not self.gone and not self.shutting_down:
            remaining = min(started + seconds, started + self._grace()) - time.monotonic()
            if remaining <= 0:
                return
            self.sleep(min(0.5, remaining))

    def _finish(self) -> None:
        """The pod reached Succeeded/Failed: report, free its address and scratch space, await deletion."""
        self.status.container.ready = False
        self.publish()
        self._release()
        while not self.stopping():
            self.sleep(60)
        self._terminate()

    def _release(self) -> None:
        self._close_relays()
        self.node.ipam.release(self.uid)
        self.node.tracker.forget(self.uid)
        volumes.remove_pod_volumes(self.run_dir)

    def _terminate(self) -> None:
        """Graceful deletion: SIGTERM, grace period, SIGKILL; then confirm with a grace-0 delete.

        The grace period is re-read while waiting, so a shorter one requested
        later (``kubectl delete --grace-period``) takes effect; a pod whose API
        object is already gone (force deletion) is killed at once.
        """
        if self.container and self.container.exit_code() is None:
            started = time.monotonic()
            self._pre_stop(started)
            log.info("%s: stopping container", self.name)
            self.container.signal_group(signal.SIGTERM)
            while self.container.exit_code() is None and not self.gone:
                grace = 5.0 if self.shutting_down else self._grace()
                remaining = started + grace - time.monotonic()
                if remaining <= 0:
                    break
                self.sleep(min(0.5, remaining))
            code = self.container.stop(0)
            # As the kubelet does on a graceful deletion: a terminal phase before the final delete, so
            # that finalizers waiting for one (the Job controller's job-tracking) let the pod go.
            stopped = next((i for i in self.status.init if i.name == self.running_container), self.status.container)
            stopped.terminated(code, "Completed" if code == 0 else "Error")
            stopped.ready = False
            self.status.phase = "Succeeded" if code == 0 else "Failed"
            self.publish()
        self._release()
        if self.shutting_down or self.gone:
            return
        try:
            self.kube.delete(
                f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
            )
        except ApiException as e:
            if e.status != 409:  # 409: the name now belongs to another pod
                raise
