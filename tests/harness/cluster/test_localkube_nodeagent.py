"""The node agent behaves like a kubelet: environment, volumes, probes, restarts, deletion, recovery."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest
from kubernetes import client

from localkube.cluster import restart
from localkube.procs import start_ticks
from localkube.state import ClusterInfo
from localkube.testing import PYTHON, pod_gone, pod_phase, simple_pod, termination_message
from localkube.wait import wait_for

pytestmark = pytest.mark.cluster

INSPECT_SCRIPT = textwrap.dedent(
    """
    import json, os, socket, stat, sys
    def read(path):
        with open(path) as f:
            return f.read()
    scratch = "/scratch/probe"
    open(scratch, "w").write("x")
    out = {
        "argv": sys.argv[1:],
        "env": {k: os.environ.get(k) for k in (
            "POD_NAME", "POD_NAMESPACE", "POD_IP", "NODE_NAME", "GREETING", "PASSWORD", "CFG_mode",
            "EXPANDED", "KUBERNETES_SERVICE_HOST")},
        "config": read("/etc/app/settings.ini"),
        "secret": read("/etc/creds/password"),
        "secret_mode": oct(stat.S_IMODE(os.stat("/etc/creds/password").st_mode)),
        "labels": read("/etc/podinfo/labels"),
        "scratch": os.path.exists(scratch),
        "hostname": socket.gethostname(),
        "sa_files": sorted(os.listdir("/var/run/secrets/kubernetes.io/serviceaccount")),
    }
    open("/dev/termination-log", "w").write(json.dumps(out))
    """
)


def test_environment_and_volumes_reach_the_process(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "app"}, "data": {"greeting": "hello", "mode": "fast", "settings.ini": "a=1\n"}}
    )
    core.create_namespaced_secret(namespace, {"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}})

    def field(path: str) -> dict[str, object]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    pod = simple_pod(
        "inspect",
        [PYTHON, "-c", INSPECT_SCRIPT],
        args=["$(GREETING)-arg", "$$(GREETING)"],
        env=[
            {"name": "POD_NAME", **field("metadata.name")},
            {"name": "POD_NAMESPACE", **field("metadata.namespace")},
            {"name": "POD_IP", **field("status.podIP")},
            {"name": "NODE_NAME", **field("spec.nodeName")},
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "greeting"}}},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
            {"name": "EXPANDED", "value": "$(POD_NAME)@$(NODE_NAME)"},
        ],
        envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "app"}}],
        volumeMounts=[
            {"name": "config", "mountPath": "/etc/app", "readOnly": True},
            {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
            {"name": "podinfo", "mountPath": "/etc/podinfo"},
            {"name": "scratch", "mountPath": "/scratch"},
        ],
    )
    pod["metadata"]["labels"] = {"tier": "test"}
    pod["spec"]["volumes"] = [
        {"name": "config", "configMap": {"name": "app", "items": [{"key": "settings.ini", "path": "settings.ini"}]}},
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {
            "name": "podinfo",
            "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
        },
        {"name": "scratch", "emptyDir": {}},
    ]
    core.create_namespaced_pod(namespace, pod)

    done = pod_phase(kube_api, namespace, "inspect", ("Succeeded", "Failed"))

    assert done.status.phase == "Succeeded", termination_message(done)
    seen = json.loads(termination_message(done))
    assert seen["argv"] == ["hello-arg", "$(GREETING)"]
    assert seen["env"] == {
        "POD_NAME": "inspect",
        "POD_NAMESPACE": namespace,
        "POD_IP": done.status.pod_ip,
        "NODE_NAME": "slipway-local",
        "GREETING": "hello",
        "PASSWORD": "s3cret",
        "CFG_mode": "fast",
        "EXPANDED": "inspect@slipway-local",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
    }
    assert done.status.pod_ip.startswith("127.0.") and done.status.host_ip == "127.0.0.1"
    assert seen["config"] == "a=1\n"
    assert seen["secret"] == "s3cret" and seen["secret_mode"] == "0o400"
    assert seen["labels"] == 'tier="test"'
    assert seen["scratch"] is True
    assert seen["hostname"] == "inspect"
    assert seen["sa_files"] == ["ca.crt", "namespace", "token"]


def test_missing_configmap_keeps_the_container_waiting(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    pod = simple_pod(
        "needs-config",
        ["true"],
        env=[{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "x"}}}],
    )
    core.create_namespaced_pod(namespace, pod)

    def waiting_reason() -> str | None:
        statuses = core.read_namespaced_pod("needs-config", namespace).status.container_statuses or []
        waiting = statuses[0].state.waiting if statuses else None
        return waiting.reason if waiting and waiting.reason != "ContainerCreating" else None

    assert wait_for(waiting_reason, 30, "a waiting reason") == "CreateContainerConfigError"


def test_crashing_container_restarts_with_back_off(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, simple_pod("crasher", ["sh", "-c", "exit 1"], restart_policy="Always"))

    def in_back_off() -> object:
        s = core.read_namespaced_pod("crasher", namespace).status.container_statuses or []
        waiting = s and s[0].state.waiting
        return waiting and waiting.reason == "CrashLoopBackOff" and s[0]

    status = wait_for(in_back_off, 30, "CrashLoopBackOff")
    assert status.restart_count >= 1
    assert status.last_state.terminated.exit_code == 1
    assert status.last_state.terminated.reason == "Error"
    assert "back-off" in status.state.waiting.message
    assert core.read_namespaced_pod("crasher", namespace).status.phase == "Running"


def test_failing_liveness_probe_restarts_the_container(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    pod = simple_pod(
        "unhealthy",
        ["sleep", "600"],
        restart_policy="Always",
        livenessProbe={"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2},
    )
    core.create_namespaced_pod(namespace, pod)

    def restarted() -> object:
        s = core.read_namespaced_pod("unhealthy", namespace).status.container_statuses or []
        return s and s[0].restart_count >= 1 and s[0]

    status = wait_for(restarted, 30, "a restart after the liveness probe failed")
    assert status.last_state.terminated.exit_code == 128 + signal.SIGTERM


def test_startup_probe_holds_readiness_and_liveness_back_then_gives_up(
    kube_api: client.ApiClient, namespace: str
) -> None:
    """A server that takes about 3 s to open its port: not started, not ready, and not killed by a
    liveness probe that would fail meanwhile; once the startup probe passes, readiness follows.
    One whose port never opens is killed after failureThreshold startup failures."""
    core = client.CoreV1Api(kube_api)
    slow = (
        "import socket, time; time.sleep(3); s = socket.socket(); "
        "s.bind((socket.gethostbyname(socket.gethostname()), 8080)); s.listen(); time.sleep(600)"
    )
    probe = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    loads = simple_pod(
        "slow-start",
        [PYTHON, "-c", slow],
        restart_policy="Always",
        startupProbe={**probe, "failureThreshold": 20},
        readinessProbe=probe,
        livenessProbe={**probe, "failureThreshold": 1},
    )
    never = simple_pod(
        "never-starts", ["sleep", "600"], restart_policy="Always", startupProbe={**probe, "failureThreshold": 3}
    )
    core.create_namespaced_pod(namespace, loads)
    core.create_namespaced_pod(namespace, never)

    seen_unstarted = False

    def ready() -> object:
        nonlocal seen_unstarted
        s = core.read_namespaced_pod("slow-start", namespace).status.container_statuses or []
        if s and s[0].state.running and not s[0].started:
            seen_unstarted = True
            assert not s[0].ready
        return s and s[0].ready and s[0]

    status = wait_for(ready, 30, "ready once the startup probe passed", interval=0.3)
    assert seen_unstarted, "the container was reported started before its startup probe passed"
    assert status.started and status.restart_count == 0, "liveness did not run before startup passed"

    def killed() -> object:
        s = core.read_namespaced_pod("never-starts", namespace).status.container_statuses or []
        return s and s[0].restart_count >= 1 and s[0]

    status = wait_for(killed, 30, "a restart after the startup probe failed 3 times")
    assert status.last_state.terminated.exit_code == 128 + signal.SIGTERM


def test_pod_without_command_reports_no_command(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    pod = simple_pod("imageonly", [])
    del pod["spec"]["containers"][0]["command"]
    core.create_namespaced_pod(namespace, pod)

    def reason() -> str | None:
        s = core.read_namespaced_pod("imageonly", namespace).status.container_statuses or []
        waiting = s[0].state.waiting if s else None
        return waiting.reason if waiting and waiting.reason == "NoCommand" else None

    assert wait_for(reason, 30, "waiting reason NoCommand") == "NoCommand"


def _pid(pod: client.V1Pod) -> int:
    return int(pod.status.container_statuses[0].container_id.removeprefix("localkube://"))


def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ignoring', flush=True); "
        "time.sleep(600)"
    )
    pod = simple_pod("stubborn", [PYTHON, "-c", stubborn], restart_policy="Always")
    pod["spec"]["terminationGracePeriodSeconds"] = 2
    core.create_namespaced_pod(namespace, pod)
    pid = _pid(pod_phase(kube_api, namespace, "stubborn", ("Running",)))
    ticks = start_ticks(pid)
    assert ticks is not None
    # Running is reported when the process starts; SIGTERM is ignored once it says so.
    wait_for(lambda: "ignoring" in core.read_namespaced_pod_log("stubborn", namespace), 30, "the handler installed")

    started = time.monotonic()
    core.delete_namespaced_pod("stubborn", namespace)
    pod_gone(kube_api, namespace, "stubborn", timeout=30)

    assert time.monotonic() - started >= 1.5, "the process ignored SIGTERM, so the grace period had to pass"
    assert start_ticks(pid) != ticks, "the process was killed"


def test_a_pre_stop_sleep_runs_before_sigterm_and_the_process_serves_on_meanwhile(
    kube_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """lifecycle.preStop.sleep, as the kubelet runs it: the process keeps running for the sleep, then
    gets SIGTERM, all within the grace period (what a serving pod's drain relies on)."""
    core = client.CoreV1Api(kube_api)
    record = tmp_path / "record"  # the pod is a local process: it writes where the test reads
    script = (
        "import signal, sys, time\n"
        f"out = open({str(record)!r}, 'a', buffering=1)\n"
        "def term(*_):\n    out.write(f'SIGTERM {time.time()}\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "while True:\n    out.write(f'alive {time.time()}\\n'); time.sleep(0.2)\n"
    )
    pod = simple_pod("draining", [PYTHON, "-c", script], restart_policy="Always")
    pod["spec"]["terminationGracePeriodSeconds"] = 10
    pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"sleep": {"seconds": 2}}}
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: record.exists() and "alive" in record.read_text(), 30, "the process running")
    deleted = time.time()
    core.delete_namespaced_pod("draining", namespace)
    pod_gone(kube_api, namespace, "draining", timeout=30)
    lines = [line.split() for line in record.read_text().splitlines()]
    signalled = [float(t) for word, t in lines if word == "SIGTERM"]
    alive_after = [float(t) for word, t in lines if word == "alive" and float(t) > deleted]
    assert signalled, "SIGTERM after the preStop sleep"
    assert signalled[0] - deleted >= 1.8, f"SIGTERM {signalled[0] - deleted:.1f}s after the delete: no preStop sleep"
    assert max(alive_after) > deleted + 1.5, "the process ran on through the preStop sleep"


@pytest.mark.serial  # restarts every test's pods
def test_restarted_node_agent_kills_orphans_and_restarts_pods(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, simple_pod("survivor", ["sleep", "600"], restart_policy="Always"))
    old_pid = _pid(pod_phase(kube_api, namespace, "survivor", ("Running",)))
    old_ticks = start_ticks(old_pid)
    agent = next(p for p in cluster.processes if p.name == "nodeagent-slipway-local")
    agent = next(p for p in (ClusterInfo.load(cluster.directory) or cluster).processes if p.name == agent.name)

    os.kill(agent.pid, signal.SIGKILL)  # a crash: no chance to stop its pods
    wait_for(lambda: not agent.alive(), 10, "the node agent to die")
    assert start_ticks(old_pid) == old_ticks, "the pod process outlived its agent"
    restart(Path(cluster.directory), agent.name)

    def restarted() -> object:
        s = core.read_namespaced_pod("survivor", namespace).status.container_statuses or []
        return s and s[0].restart_count >= 1 and s[0].state.running and s[0]

    status = wait_for(restarted, 30, "the pod to run again")
    assert start_ticks(old_pid) != old_ticks, "the orphan was killed"
    assert status.last_state.terminated.exit_code == 137
    assert core.read_node("slipway-local").status.conditions[-1].status == "True"


def test_init_containers_run_in_order_before_the_first_container(kube_api: client.ApiClient, namespace: str) -> None:
    """Each init container runs to success before the next; the first container then reads
    what they wrote to a shared emptyDir, and their statuses say Completed."""
    core = client.CoreV1Api(kube_api)
    shared = [{"name": "shared", "mountPath": "/shared"}]
    pod = simple_pod(
        "with-init",
        ["sh", "-c", "cat /shared/order > /dev/termination-log"],
        volumeMounts=shared,
    )
    pod["spec"]["volumes"] = [{"name": "shared", "emptyDir": {}}]
    pod["spec"]["initContainers"] = [
        {"name": "fetch", "image": "busybox", "command": ["sh", "-c", "echo fetched; echo fetch > /shared/order"],
         "volumeMounts": shared},
        {"name": "check", "image": "busybox", "command": ["sh", "-c", "echo checked; echo check >> /shared/order"],
         "volumeMounts": shared},
    ]  # fmt: skip
    core.create_namespaced_pod(namespace, pod)
    done = pod_phase(kube_api, namespace, "with-init", ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded"
    assert termination_message(done).split() == ["fetch", "check"]
    inits = {s.name: s for s in done.status.init_container_statuses}
    assert [s.name for s in done.status.init_container_statuses] == ["fetch", "check"]
    assert all(s.state.terminated.reason == "Completed" and s.restart_count == 0 for s in inits.values())
    assert inits["fetch"].state.terminated.finished_at <= inits["check"].state.terminated.started_at
    conditions = {c.type: c.status for c in done.status.conditions}
    assert conditions["Initialized"] == "True"
    assert core.read_namespaced_pod_log("with-init", namespace, container="check") == "checked\n"


def test_a_failing_init_container_is_retried_or_fails_the_pod(kube_api: client.ApiClient, namespace: str) -> None:
    """restartPolicy OnFailure: the init container runs again (restartCount) until it succeeds;
    restartPolicy Never: the pod fails and its first container never starts."""
    core = client.CoreV1Api(kube_api)
    flaky = "test -f /shared/tried || { touch /shared/tried; echo first try fails; exit 3; }"
    retried = simple_pod("init-retried", ["true"], volumeMounts=[{"name": "shared", "mountPath": "/shared"}])
    retried["spec"]["restartPolicy"] = "OnFailure"
    retried["spec"]["volumes"] = [{"name": "shared", "emptyDir": {}}]
    retried["spec"]["initContainers"] = [
        {"name": "flaky", "image": "busybox", "command": ["sh", "-c", flaky],
         "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]},
    ]  # fmt: skip
    never = simple_pod("init-never", ["sh", "-c", "echo main ran"])
    never["spec"]["restartPolicy"] = "Never"
    never["spec"]["initContainers"] = [{"name": "broken", "image": "busybox", "command": ["sh", "-c", "exit 4"]}]
    core.create_namespaced_pod(namespace, retried)
    core.create_namespaced_pod(namespace, never)

    failed = pod_phase(kube_api, namespace, "init-never", ("Succeeded", "Failed"))
    assert failed.status.phase == "Failed"
    assert failed.status.init_container_statuses[0].state.terminated.exit_code == 4
    assert failed.status.container_statuses[0].state.waiting.reason == "PodInitializing"
    assert {c.type: c.status for c in failed.status.conditions}["Initialized"] == "False"

    ok = pod_phase(kube_api, namespace, "init-retried", ("Succeeded", "Failed"))
    assert ok.status.phase == "Succeeded"
    flaky_status = ok.status.init_container_statuses[0]
    assert flaky_status.restart_count == 1
    assert flaky_status.last_state.terminated.exit_code == 3
    log_then = core.read_namespaced_pod_log("init-retried", namespace, container="flaky", previous=True)
    assert log_then == "first try fails\n"


def test_host_network_pod_uses_the_host_address(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    pod = simple_pod("on-host", ["sh", "-c", "printf %s $POD_IP > /dev/termination-log"])
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"][0]["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    core.create_namespaced_pod(namespace, pod)

    done = pod_phase(kube_api, namespace, "on-host", ("Succeeded", "Failed"))

    assert done.status.pod_ip == "127.0.0.1"
    assert termination_message(done) == "127.0.0.1"
