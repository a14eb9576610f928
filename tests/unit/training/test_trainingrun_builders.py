"""TrainingRun -> Job, PVC and headless Service: the shapes users and Kubernetes rely on."""

from __future__ import annotations

import re
from typing import Any

import pytest

from slipway.training import build, gate
from slipway.training.model import TrainingRunSpec

URI = "http://mlflow:5000"
LINK = gate.MlflowLink(URI, "run123", "7")


def spec(**extra: Any) -> TrainingRunSpec:
    return TrainingRunSpec.model_validate({"model": {"name": "digits"}, "image": "img:1", **extra})


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_single_node_job_with_gpus_mlflow_env_and_no_service():
    s = spec(resources={"gpus": 2, "cpu": "8", "memory": "32Gi"}, command=["python", "-m", "train"])
    job = build.job("r1", "ns", s, URI)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert job["metadata"]["name"] == "r1-train"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"}
    assert container["command"] == ["python", "-m", "train"]
    assert pod["restartPolicy"] == "Never"
    run_id = {"fieldRef": {"fieldPath": "metadata.annotations['slipway.dev/mlflow-run-id']"}}
    assert env_of(job)["MLFLOW_RUN_ID"] == run_id
    assert env_of(job)["MLFLOW_EXPERIMENT_ID"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['slipway.dev/mlflow-experiment-id']"}
    }
    assert env_of(job)["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert "completionMode" not in job["spec"]
    # made before its MLflow run: suspended, its pods gated until the run is written into them
    assert job["spec"]["suspend"] is True
    assert pod["schedulingGates"] == [{"name": "slipway.dev/mlflow-run"}]
    assert gate.gated(job["spec"]["template"])
    assert build.headless_service("r1", "ns", s) is None
    assert build.checkpoint_pvc("r1", "ns", s) is None


def test_custom_gpu_resource_name():
    job = build.job("r1", "ns", spec(resources={"gpus": 1, "gpuResourceName": "amd.com/gpu"}), URI)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "1"}


def test_checkpoint_claim_is_mounted_with_env():
    s = spec(checkpoint={"size": "10Gi", "storageClassName": "local"})
    pvc = build.checkpoint_pvc("r1", "ns", s)
    assert pvc is not None
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert pvc["spec"]["storageClassName"] == "local"
    job = build.job("r1", "ns", s, URI)
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "r1-checkpoints"}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/checkpoints"}]
    assert env_of(job)["SLIPWAY_CHECKPOINT_DIR"] == "/checkpoints"


def test_a_checkpointing_pod_can_write_a_fresh_volume_whose_root_belongs_to_root():
    """Found on the real node: a block volume's root is root's, mode 0755, and the trainer (UID 65532)
    could not write /checkpoints. The pod's fsGroup gives the volume to a group every container is in."""
    pod = build.job("r1", "ns", spec(checkpoint={"size": "1Gi"}), URI)["spec"]["template"]["spec"]
    assert pod["securityContext"]["fsGroup"] == 65532
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"  # no recursive chown each start
    assert pod["securityContext"]["runAsNonRoot"] is True  # restricted still
    no_volume = build.job("r1", "ns", spec(), URI)["spec"]["template"]["spec"]
    assert "fsGroup" not in no_volume["securityContext"]
    own = spec(checkpoint={"size": "1Gi"}, podTemplate={"securityContext": {"fsGroup": 1000}})
    assert build.job("r1", "ns", own, URI)["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 1000


def test_multi_node_is_indexed_job_with_torchrun_env_and_headless_service():
    s = spec(nodes=2)
    job = build.job("r1", "ns", s, URI)
    svc = build.headless_service("r1", "ns", s)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert job["spec"]["template"]["spec"]["subdomain"] == "r1-workers"
    env = env_of(job)
    assert env["MASTER_ADDR"] == "r1-train-0.r1-workers"
    assert env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "2"
    assert env["NODE_RANK"]["fieldRef"]["fieldPath"].endswith("['batch.kubernetes.io/job-completion-index']")
    assert svc is not None
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"slipway.dev/trainingrun": "r1"}


def test_queue_name_sets_kueue_label_and_starts_suspended():
    job = build.job("r1", "ns", spec(queueName="team-a"), URI)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True


def test_failure_policy_maps_to_backoff_and_pod_failure_policy():
    s = spec(failurePolicy={"maxRestarts": 4, "permanentExitCodes": [3], "activeDeadlineSeconds": 600})
    job = build.job("r1", "ns", s, URI)
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert job["spec"]["backoffLimit"] == 4
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert rules[1]["action"] == "FailJob"
    assert rules[1]["onExitCodes"] == {"containerName": "trainer", "operator": "In", "values": [3]}
    assert len(rules) == 2


def test_retryable_codes_count_and_others_fail():
    rules = build.pod_failure_policy(spec(failurePolicy={"retryableExitCodes": [143, 137]}))["rules"]
    assert rules[1] == {
        "action": "Count",
        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [137, 143]},
    }
    assert rules[2]["action"] == "FailJob"
    assert rules[2]["onExitCodes"]["operator"] == "NotIn"


def test_user_env_wins_over_slipway_defaults():
    job = build.job("r1", "ns", spec(env=[{"name": "MLFLOW_TRACKING_URI", "value": "https://mine"}]), URI)
    names = [e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.count("MLFLOW_TRACKING_URI") == 1
    assert env_of(job)["MLFLOW_TRACKING_URI"] == "https://mine"


def test_scheduling_fields_pass_through():
    s = spec(
        nodeSelector={"pool": "gpu"},
        tolerations=[{"key": "gpu", "operator": "Exists"}],
        priorityClassName="low",
        suspend=True,
    )
    pod = build.job("r1", "ns", s, URI)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["priorityClassName"] == "low"
    assert build.job("r1", "ns", s, URI)["spec"]["suspend"] is True


TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


def test_a_jobset_runs_the_nodes_as_one_gang_that_restarts_whole():
    s = spec(nodes=4, resources={"gpus": 8}, queueName="team-a", checkpoint={"size": "10Gi"},
             failurePolicy={"maxRestarts": 3, "retryableExitCodes": [137], "permanentExitCodes": [3]},
             podTemplate={"annotations": {TOPOLOGY: "cloud.google.com/gke-nodepool"}})  # fmt: skip
    js = build.jobset("r1", "ns", s, URI)
    assert (js["apiVersion"], js["kind"], js["metadata"]["name"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet", "r1-train")
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert js["spec"]["suspend"] is True  # Kueue admits the whole gang
    assert js["spec"]["network"] == {
        "enableDNSHostnames": True,
        "subdomain": "r1-workers",
        "publishNotReadyAddresses": True,
    }
    policy = js["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 3
    assert policy["rules"] == [
        {"name": "exitCodeNotRetried", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
    ]
    (workers,) = js["spec"]["replicatedJobs"]
    job_spec = workers["template"]["spec"]
    assert (workers["replicas"], job_spec["completions"], job_spec["parallelism"]) == (1, 4, 4)
    assert job_spec["completionMode"] == "Indexed"
    assert job_spec["backoffLimit"] == 0  # one failed pod fails the Job: the JobSet restarts the group
    assert "suspend" not in job_spec  # the JobSet suspends its Jobs
    assert {r["action"] for r in job_spec["podFailurePolicy"]["rules"]} == {"Ignore", "FailJob", "Count"}
    env = env_of({"spec": job_spec})
    assert env["MASTER_ADDR"] == "r1-train-workers-0-0.r1-workers"
    assert env["WORLD_SIZE"] == "4"
    pod = job_spec["template"]
    # Topology hints (Kueue TAS) pass through from spec.podTemplate.
    assert pod["metadata"]["annotations"][TOPOLOGY] == "cloud.google.com/gke-nodepool"
    assert pod["metadata"]["labels"][build.RUN_LABEL] == "r1"


DNS1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


HOSTILE_NAMES = ["r" * 63, "7b-sweep", "team-a.llama-3.1-8b.instruct-finetune-2024-06-01-lr-3e-4-seed-7", "a" * 42]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_jobset_passes_jobsets_own_name_checks_whatever_the_runs_name(name: str):
    """What JobSet's webhook checks (pkg/webhooks/jobset_webhook.go, v0.11.1): its last Job's name and
    its last pod's name with a 5-character suffix are DNS-1035 labels; its subdomain is one."""
    js = build.jobset(name, "ns", spec(nodes=1024), URI)
    jobset = js["metadata"]["name"]
    (workers,) = js["spec"]["replicatedJobs"]
    assert DNS1035.fullmatch(f"{jobset}-{workers['name']}-0"), jobset
    assert DNS1035.fullmatch(f"{jobset}-{workers['name']}-0-1023-abcde"), jobset
    assert DNS1035.fullmatch(js["spec"]["network"]["subdomain"])
    host, subdomain = build.master_addr(name, "JobSet").split(".")
    assert host == f"{jobset}-{build.WORKERS}-0-0" and subdomain == js["spec"]["network"]["subdomain"]
    assert jobset == build.jobset_name(name)  # deterministic: a restarted operator finds it
    assert build.jobset_name(name + "x") != jobset


def test_release_gives_the_pods_their_run_and_lifts_only_slipways_gate():
    job = build.job("r1", "ns", spec(), URI)
    job["spec"]["template"]["spec"]["schedulingGates"].append({"name": "kueue.x-k8s.io/topology"})
    patch = gate.release_patch(job, LINK, resume=True)
    template = patch["spec"]["template"]
    assert template["metadata"]["annotations"] == {"slipway.dev/mlflow-run-id": "run123",
                                                   "slipway.dev/mlflow-experiment-id": "7"}  # fmt: skip
    assert template["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    assert patch["spec"]["suspend"] is False
    held = gate.release_patch(build.job("r1", "ns", spec(), URI), LINK, resume=False)
    assert held["spec"]["template"]["spec"]["schedulingGates"] is None  # merge patch: the field removed
    assert "suspend" not in held["spec"]  # Kueue or spec.suspend decides


def test_release_of_a_pod_made_gated():
    pod = {"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "slipway.dev/mlflow-run"}]}}
    assert gate.gated(pod)
    patch = gate.release(pod, LINK)
    assert patch == {"metadata": {"annotations": {"slipway.dev/mlflow-run-id": "run123",
                                                  "slipway.dev/mlflow-experiment-id": "7"}},
                     "spec": {"schedulingGates": None}}  # fmt: skip
    assert not gate.gated({"metadata": {}, "spec": {}})


def test_release_of_a_jobset_keeps_its_replicated_job_whole():
    js = build.jobset("r1", "ns", spec(nodes=2), URI)
    assert js["spec"]["suspend"] is True and gate.gated(gate.pod_template_of(js))
    patch = gate.release_patch(js, LINK, resume=True)
    replicated = patch["spec"]["replicatedJobs"]
    assert [r["name"] for r in replicated] == ["workers"] and replicated[0]["replicas"] == 1
    inner = replicated[0]["template"]["spec"]
    assert inner["completions"] == 2 and inner["backoffLimit"] == 0
    template = inner["template"]
    assert "schedulingGates" not in template["spec"]
    assert template["metadata"]["annotations"]["slipway.dev/mlflow-run-id"] == "run123"
    assert template["metadata"]["annotations"]["slipway.dev/trainingrun-name"] == "r1"  # kept
    assert template["spec"]["containers"] == gate.pod_template_of(js)["spec"]["containers"]
    assert patch["spec"]["suspend"] is False
    assert gate.gated(gate.pod_template_of(js))  # the built object itself is not changed


def test_a_gang_is_released_whole_and_never_left_half_released():
    def pod(name: str, owner: str, gated: bool = True, going: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "ownerReferences": [{"uid": owner}]}
        if going:
            meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
        return {"metadata": meta, "spec": {"schedulingGates": [{"name": gate.RUN_GATE}] if gated else []}}

    def names(pods: list[dict[str, Any]]) -> list[str]:
        return [p["metadata"]["name"] for p in pods]

    one = [pod("a-0", "job")]
    assert names(gate.pods_to_release(one, {"job"}, gang=2)) == []  # the second rank is not made yet
    both = [pod("a-0", "job"), pod("a-1", "job")]
    assert names(gate.pods_to_release(both, {"job"}, gang=2)) == ["a-0", "a-1"]
    # rank 0 released before a failed pass, rank 1 still gated: released, not held back for ever
    half = [pod("a-0", "job", gated=False), pod("a-1", "job")]
    assert names(gate.pods_to_release(half, {"job"}, gang=2)) == ["a-1"]
    # a replacement of one preempted rank, its gate from a Job template that kept it
    replaced = [pod("a-0", "job", gated=False), pod("a-1", "job", going=True), pod("a-1b", "job")]
    assert names(gate.pods_to_release(replaced, {"job"}, gang=2)) == ["a-1b"]
    assert names(gate.pods_to_release([pod("x", "someone-else")], {"job"}, gang=1)) == []  # not ours
    assert names(gate.pods_to_release(one, {"job"}, gang=1)) == ["a-0"]  # an Indexed Job: each pod


def test_a_checkpointing_runs_pods_get_the_grace_its_checkpoint_needs_within_a_bound():
    default = build.job("r1", "ns", spec(checkpoint={"size": "10Gi"}), URI)["spec"]["template"]["spec"]
    assert default["terminationGracePeriodSeconds"] == 120  # not Kubernetes' 30 s
    asked = spec(checkpoint={"size": "10Gi", "graceSeconds": 900}, nodes=2)
    for child in (build.job("r1", "ns", asked, URI), build.jobset("r1", "ns", asked, URI)):
        assert '"terminationGracePeriodSeconds": 900' in str(child).replace("'", '"')
    assert "terminationGracePeriodSeconds" not in build.job("r1", "ns", spec(), URI)["spec"]["template"]["spec"]
    for bad in (0, 3601):
        with pytest.raises(ValueError, match="graceSeconds"):
            spec(checkpoint={"size": "10Gi", "graceSeconds": bad})
