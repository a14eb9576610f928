"""TrainingRun -> Job, checkpoint PersistentVolumeClaim and (multi-node) headless Service."""

from __future__ import annotations

from typing import Any

from slipway import API_VERSION, kinds, names
from slipway.names import MANAGED_BY, dns1035_name, dns1123_name, label_value
from slipway.podspec import apply_pod_template, env_list, resource_requirements
from slipway.training.gate import EXPERIMENT_ID_ANNOTATION, RUN_GATE, RUN_ID_ANNOTATION
from slipway.training.model import TrainingRunSpec

CHECKPOINT_MOUNT = "/checkpoints"
CHECKPOINT_FS_GROUP = 65532  # the workloads image's user; spec.podTemplate.securityContext.fsGroup wins
MASTER_PORT = 29500
RUN_LABEL = "slipway.dev/trainingrun"  # the run's name as a label value (hashed past 63 characters)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # a Job's LocalQueue: Kueue queues the Job there
RUN_NAME_ANNOTATION = "slipway.dev/trainingrun-name"  # on pods: the run's full name
MAX_NODES = 1024  # spec.nodes' bound in the CRD
# An Indexed Job's pods are named by the hostname <job>-<index>, a DNS-1123 label: room for the last index.
MAX_JOB_NAME = names.MAX_LABEL - len(f"-{MAX_NODES - 1}")
CONTAINER = "trainer"
# A JobSet's one replicated Job; its pods' hostnames are <jobset>-<replicated job>-<job index>-<pod index>.
# JobSet's webhook refuses a JobSet unless that name, with a pod name's 5-character random suffix,
# is a DNS-1035 label.
WORKERS = "workers"
MAX_JOBSET_NAME = names.MAX_LABEL - len(f"-{WORKERS}-0-{MAX_NODES - 1}-abcde")
JOBSET_API = kinds.JOBSET.api_version


def job_name(run: str) -> str:
    """``<run>-train``, short enough for the hostname of any index of an Indexed Job."""
    return dns1123_name(run, "train", max_length=MAX_JOB_NAME)


def pvc_name(run: str) -> str:
    return dns1123_name(run, "checkpoints")


def service_name(run: str) -> str:
    """The headless Service, also the pods' ``subdomain``: a DNS-1035 label."""
    return dns1035_name(run, "workers")


def jobset_name(run: str) -> str:
    """``<run>-train``: a DNS-1035 label (JobSet's names of its Jobs and pods must be ones), short
    enough for the name of any pod of the JobSet."""
    return dns1035_name(run, "train", max_length=MAX_JOBSET_NAME)


def master_addr(run: str, runtime: str = "Job") -> str:
    """Rank 0 of a multi-node run: the first pod of the Indexed Job (or of the JobSet's one
    replicated Job), through the headless Service."""
    if runtime == "JobSet":
        return f"{jobset_name(run)}-{WORKERS}-0-0.{service_name(run)}"
    return f"{job_name(run)}-0.{service_name(run)}"


def labels(run: str) -> dict[str, str]:
    return {**MANAGED_BY, RUN_LABEL: label_value(run)}


def run_of_pod(meta: dict[str, Any]) -> str:
    """The TrainingRun a training pod belongs to (see :func:`parent_name`)."""
    return names.parent_name(meta, RUN_NAME_ANNOTATION, RUN_LABEL)


def checkpoint_pvc(name: str, namespace: str, spec: TrainingRunSpec) -> dict[str, Any] | None:
    """The claim that outlives pods; None without spec.checkpoint."""
    if spec.checkpoint is None:
        return None
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteMany" if spec.nodes > 1 else "ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.checkpoint.size}},
    }
    if spec.checkpoint.storage_class_name:
        claim["storageClassName"] = spec.checkpoint.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc_name(name), "namespace": namespace, "labels": labels(name)},
        "spec": claim,
    }


def headless_service(name: str, namespace: str, spec: TrainingRunSpec) -> dict[str, Any] | None:
    """Stable DNS names for the workers of a multi-node run; None for one node."""
    if spec.nodes <= 1:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(name), "namespace": namespace, "labels": labels(name)},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {RUN_LABEL: label_value(name)},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
        },
    }


def pod_failure_policy(spec: TrainingRunSpec) -> dict[str, Any]:
    """Preemption never counts; permanent codes fail at once; with retryable codes listed,
    only those are retried and any other code fails at once."""
    policy = spec.failure_policy
    rules: list[dict[str, Any]] = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    if policy.permanent_exit_codes:
        rules.append(
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER,
                    "operator": "In",
                    "values": sorted(policy.permanent_exit_codes),
                },
            }
        )
    if policy.retryable_exit_codes:
        codes = sorted(policy.retryable_exit_codes)
        rules.append(
            {"action": "Count", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": codes}}
        )
        rules.append(
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": list(codes)},
            }
        )
    return {"rules": rules}


# Every variable Slipway sets in the trainer's container, and when: the trainer's contract
# (docs/reference/programs/trainer.md is generated from it; a test holds it to training_env).
# A variable of the same name in spec.env or spec.podTemplate.env wins.
TRAINER_ENV: dict[str, str] = {
    "SLIPWAY_TRAININGRUN": "The TrainingRun's name.",
    "SLIPWAY_MODEL_NAME": "The registered model the run trains (spec.model.name).",
    "MLFLOW_TRACKING_URI": "The MLflow address the pods use (the operator's, without credentials).",
    "MLFLOW_RUN_ID": "The MLflow run Slipway made before the pods started (from the pod's annotation "
    f"{RUN_ID_ANNOTATION}): report to it; `mlflow.start_run()` attaches to it.",
    "MLFLOW_EXPERIMENT_ID": f"That run's experiment (from the pod's annotation {EXPERIMENT_ID_ANNOTATION}).",
    "SLIPWAY_CHECKPOINT_DIR": f"With spec.checkpoint: `{CHECKPOINT_MOUNT}`, a volume that outlives the pods; write "
    "checkpoints there and resume from the newest.",
    "MASTER_ADDR": "With spec.nodes > 1: rank 0's address (the first pod, through the run's headless Service).",
    "MASTER_PORT": f"With spec.nodes > 1: `{MASTER_PORT}`, the rendezvous port.",
    "WORLD_SIZE": "With spec.nodes > 1: spec.nodes.",
    "NODE_RANK": "With spec.nodes > 1: this pod's index, 0 to spec.nodes - 1 (its Job completion index).",
}


def training_env(
    name: str, spec: TrainingRunSpec, tracking_uri: str | None, runtime: str = "Job"
) -> list[dict[str, Any]]:
    base: dict[str, str] = {"SLIPWAY_TRAININGRUN": name, "SLIPWAY_MODEL_NAME": spec.model.name}
    if tracking_uri is not None:
        base["MLFLOW_TRACKING_URI"] = tracking_uri
    if spec.checkpoint is not None:
        base["SLIPWAY_CHECKPOINT_DIR"] = CHECKPOINT_MOUNT
    env = env_list(base, spec.env)
    if tracking_uri is not None:  # the run, from the pod's annotations (see RUN_GATE)
        given = {e["name"] for e in env}
        from_pod = (("MLFLOW_RUN_ID", RUN_ID_ANNOTATION), ("MLFLOW_EXPERIMENT_ID", EXPERIMENT_ID_ANNOTATION))
        env += [
            {"name": var, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}}
            for var, key in from_pod
            if var not in given
        ]
    if spec.nodes > 1:
        # What torchrun reads: rank 0 is the first pod of the Indexed Job, reachable
        # through the headless Service as <job>-0.<service>.
        env += [
            {"name": "MASTER_ADDR", "value": master_addr(name, runtime)},
            {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
            {"name": "WORLD_SIZE", "value": str(spec.nodes)},
            {
                "name": "NODE_RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                },
            },
        ]
    return env


def job(
    name: str,
    namespace: str,
    spec: TrainingRunSpec,
    tracking_uri: str | None,
    priority_class: str = "",
    runtime: str = "Job",
) -> dict[str, Any]:
    """The training Job, suspended and its pods gated until its MLflow run exists (RUN_GATE,
    :func:`release`); with a Kueue queue it stays suspended for Kueue to admit. Its pods get
    spec.priorityClassName, else ``priority_class`` (the operator's default, preemptible).
    ``runtime="JobSet"``: the Job as the JobSet's replicated Job runs it (see :func:`jobset`)."""
    container = _container(name, spec, tracking_uri, runtime)
    pod = _pod(name, spec, container, tracking_uri, priority_class)
    job_labels = labels(name)
    if spec.queue_name:
        job_labels[QUEUE_LABEL] = spec.queue_name
    job_spec: dict[str, Any] = {
        "backoffLimit": spec.failure_policy.max_restarts,
        "podFailurePolicy": pod_failure_policy(spec),
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "suspend": True if tracking_uri is not None else spec.suspend or spec.queue_name is not None,
        "template": {"metadata": {"labels": labels(name), "annotations": {RUN_NAME_ANNOTATION: name}}, "spec": pod},
    }
    apply_pod_template(job_spec["template"], container, spec.pod_template, spec.resources.gpus)
    if spec.checkpoint is not None:
        # A fresh volume's root belongs to root (mode 0755 on most block storage): the kubelet gives it
        # to this group, which every container of the pod is in, whatever UID it runs as.
        security = job_spec["template"]["spec"]["securityContext"]
        if "fsGroup" not in security:
            security |= {"fsGroup": CHECKPOINT_FS_GROUP, "fsGroupChangePolicy": "OnRootMismatch"}
    if spec.nodes > 1:
        job_spec["completionMode"] = "Indexed"
    if spec.failure_policy.active_deadline_seconds:
        job_spec["activeDeadlineSeconds"] = spec.failure_policy.active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(name), "namespace": namespace, "labels": job_labels},
        "spec": job_spec,
    }


def _container(name: str, spec: TrainingRunSpec, tracking_uri: str | None, runtime: str) -> dict[str, Any]:
    """The trainer's container, with the checkpoint volume mounted if the run keeps checkpoints."""
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "env": training_env(name, spec, tracking_uri, runtime),
        "resources": resource_requirements(spec.resources),
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if spec.checkpoint is not None:
        container["volumeMounts"] = [{"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}]
    return container


def _pod(
    name: str, spec: TrainingRunSpec, container: dict[str, Any], tracking_uri: str | None, priority_class: str
) -> dict[str, Any]:
    """The training pods' spec: gated until the MLflow run exists, with the checkpoint volume, the
    placement, the priority class and, for several nodes, the headless Service's subdomain."""
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if tracking_uri is not None:
        pod["schedulingGates"] = [{"name": RUN_GATE}]
    volumes = []
    if spec.checkpoint is not None:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": pvc_name(name)}})
        pod["terminationGracePeriodSeconds"] = spec.checkpoint.grace_seconds
    if volumes:
        pod["volumes"] = volumes
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [t.to_dict() for t in spec.tolerations]
    chosen_priority = (
        spec.priority_class_name or (spec.pod_template and spec.pod_template.priority_class_name) or priority_class
    )
    if chosen_priority:
        pod["priorityClassName"] = chosen_priority
    if spec.nodes > 1:
        pod["subdomain"] = service_name(name)
    return pod


def jobset(
    name: str, namespace: str, spec: TrainingRunSpec, tracking_uri: str | None, priority_class: str = ""
) -> dict[str, Any]:
    """A multi-node run as one gang: a JobSet of one Indexed Job of ``spec.nodes`` pods. Any failed
    pod fails that Job (backoffLimit 0) and the JobSet recreates the whole group, at most
    ``maxRestarts`` times; a permanent or non-retryable exit code (the Job's podFailurePolicy)
    fails the JobSet at once. JobSet makes the headless Service (``network.subdomain``). With a
    Kueue queue it starts suspended and Kueue admits all its pods at once."""
    inner = job(name, namespace, spec, tracking_uri, priority_class, runtime="JobSet")
    labels_ = dict(inner["metadata"]["labels"])
    job_spec = {**inner["spec"], "backoffLimit": 0}
    suspend = job_spec.pop("suspend")
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": jobset_name(name), "namespace": namespace, "labels": labels_},
        "spec": {
            "suspend": suspend,
            "network": {"enableDNSHostnames": True, "subdomain": service_name(name), "publishNotReadyAddresses": True},
            "failurePolicy": {
                "maxRestarts": spec.failure_policy.max_restarts,
                "rules": [
                    {
                        "name": "exitCodeNotRetried",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "successPolicy": {"operator": "All"},
            "replicatedJobs": [
                {"name": WORKERS, "replicas": 1, "template": {"metadata": {"labels": labels(name)}, "spec": job_spec}}
            ],
        },
    }


def model_artifact(name: str, namespace: str, spec: TrainingRunSpec) -> dict[str, Any]:
    """The run's ModelArtifact (spec.artifact), made once training finished: named as the run, its
    source the run itself (trainingRunRef)."""
    assert spec.artifact is not None
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelArtifact",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(name)},
        "spec": {
            "model": spec.model.to_dict(),
            "source": {"trainingRunRef": {"name": name}},
            **spec.artifact.to_dict(),
        },
    }
