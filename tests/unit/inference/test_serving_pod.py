"""The serving pod an InferenceDeployment asks for: probes (defaults that let a large model load
for 30 minutes, per-field overrides), spec.modelLoad's fetch init container and read-only model
volume, spec.podTemplate merged into both tracks, and revisions unchanged by fields left unset."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slipway.inference import build, revision
from slipway.inference.model import InferenceDeploymentSpec
from slipway.podspec import with_credentials

BASE: dict[str, Any] = {"model": {"name": "digits", "alias": "candidate"}, "image": "server:1", "port": 9000}
WORKLOAD_IMAGE = "ghcr.io/slipway-dev/slipway:0.1.0"


def pod(track: str = "stable", **fields: Any) -> dict[str, Any]:
    spec = InferenceDeploymentSpec.model_validate({**BASE, **fields})
    body = build.deployment(
        "digits", "ns", spec, track, "3", "models:/digits/3", "http://mlflow:5000", None, "digits", WORKLOAD_IMAGE
    )
    return body["spec"]["template"]


def server(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["containers"][0]


def test_default_probes_let_a_model_load_for_30_minutes_before_liveness() -> None:
    c = server(pod())
    startup = c["startupProbe"]
    assert startup["httpGet"] == {"path": "/healthz", "port": 9000}
    assert startup["periodSeconds"] * startup["failureThreshold"] == 1800
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "initialDelaySeconds" not in c["livenessProbe"]  # the startup probe holds it back


def test_probe_fields_override_one_by_one() -> None:
    probes = {"startup": {"failureThreshold": 360}, "readiness": {"path": "/ready", "port": 9001, "periodSeconds": 5}}
    c = server(pod(probes=probes))
    assert c["startupProbe"]["failureThreshold"] == 360 and c["startupProbe"]["periodSeconds"] == 10
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 9001}
    assert c["readinessProbe"]["periodSeconds"] == 5 and c["readinessProbe"]["failureThreshold"] == 2


def test_model_load_fetches_into_a_read_only_volume_before_the_server() -> None:
    template = pod(modelLoad={"cacheClaimName": "model-cache"})
    spec = template["spec"]
    (fetch,) = spec["initContainers"]
    assert fetch["image"] == WORKLOAD_IMAGE and fetch["command"] == ["python", "-m", "slipway.workloads.fetch"]
    fetch_env = {e["name"]: e.get("value") for e in fetch["env"]}
    assert fetch_env["SLIPWAY_MODEL_URI"] == "models:/digits/3"
    assert fetch_env["SLIPWAY_MODEL_PATH"] == "/models/current"
    assert fetch_env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert fetch_env["SLIPWAY_MODEL_CACHE"] == build.CACHE_PATH
    assert {"name": build.MODEL_VOLUME, "mountPath": "/models/current"} in fetch["volumeMounts"]
    c = server(template)
    assert {"name": build.MODEL_VOLUME, "mountPath": "/models/current", "readOnly": True} in c["volumeMounts"]
    assert {e["name"]: e.get("value") for e in c["env"]}["SLIPWAY_MODEL_PATH"] == "/models/current"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[build.MODEL_VOLUME] == {"name": build.MODEL_VOLUME, "emptyDir": {}}
    assert volumes[build.CACHE_VOLUME]["persistentVolumeClaim"] == {"claimName": "model-cache"}


def test_mlflow_credentials_reach_the_fetch_container_by_reference() -> None:
    spec = InferenceDeploymentSpec.model_validate({**BASE, "modelLoad": {}})
    body = build.deployment("d", "ns", spec, "stable", "3", "models:/digits/3", "http://m", None, "digits", "img")
    body = with_credentials(body, "creds")
    fetch = body["spec"]["template"]["spec"]["initContainers"][0]
    assert fetch["envFrom"] == [{"secretRef": {"name": "creds", "optional": True}}]
    # The model server reads the fetched files: it never talks to MLflow, so it gets no credentials.
    assert "envFrom" not in server(body["spec"]["template"])
    # Without modelLoad the server loads the model from MLflow itself, and gets them.
    plain = InferenceDeploymentSpec.model_validate(BASE)
    body = build.deployment("d", "ns", plain, "stable", "3", "models:/digits/3", "http://m", None, "digits", "img")
    assert server(with_credentials(body, "creds")["spec"]["template"])["envFrom"] == fetch["envFrom"]


def test_pod_template_reaches_both_tracks_and_slipway_labels_win() -> None:
    template_spec = {
        "labels": {"team": "search", build.TRACK_LABEL: "hijack"},
        "annotations": {"owner": "sre"},
        "nodeSelector": {"gpu": "a100"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
        "volumes": [{"name": "hf", "secret": {"secretName": "hf-token"}}],
        "volumeMounts": [{"name": "hf", "mountPath": "/etc/hf", "readOnly": True}],
        "env": [{"name": "HF_HOME", "value": "/tmp/hf"}],
        "envFrom": [{"configMapRef": {"name": "tuning"}}],
        "serviceAccountName": "server",
        "imagePullSecrets": [{"name": "registry"}],
        "priorityClassName": "slipway-inference",
    }
    for track in build.TRACKS:
        template = pod(track, podTemplate=template_spec)
        labels, spec, c = template["metadata"]["labels"], template["spec"], server(template)
        assert labels["team"] == "search" and labels[build.TRACK_LABEL] == track
        assert template["metadata"]["annotations"]["owner"] == "sre"
        assert spec["nodeSelector"] == {"gpu": "a100"} and spec["tolerations"][0]["key"] == "gpu"
        assert spec["serviceAccountName"] == "server" and spec["priorityClassName"] == "slipway-inference"
        assert spec["imagePullSecrets"] == [{"name": "registry"}] and "nodeAffinity" in spec["affinity"]
        assert spec["volumes"] == [{"name": "hf", "secret": {"secretName": "hf-token"}}]
        assert c["volumeMounts"] == [{"name": "hf", "mountPath": "/etc/hf", "readOnly": True}]
        assert {"name": "HF_HOME", "value": "/tmp/hf"} in c["env"] and c["envFrom"] == [
            {"configMapRef": {"name": "tuning"}}
        ]


def test_a_mount_over_the_model_path_is_refused() -> None:
    with pytest.raises(ValidationError, match="would hide the model"):
        InferenceDeploymentSpec.model_validate(
            {**BASE, "modelLoad": {}, "podTemplate": {"volumeMounts": [{"name": "x", "mountPath": "/models/current"}]}}
        )


def test_revision_changes_only_with_fields_that_are_set() -> None:
    plain = InferenceDeploymentSpec.model_validate(BASE)
    before = revision.revision(plain, "3", "models:/digits/3", "digits")
    # What Slipway computed for this spec before probes, modelLoad and podTemplate existed, and
    # before the MLflow address left the hash, is still known as the same revision (see
    # test_operator_fields): an operator upgrade does not make every InferenceDeployment canary.
    assert revision.legacy_revisions(plain, "3", "models:/digits/3", "digits", ["http://m"]) == {"cd0a062f03"}
    for extra in (
        {"probes": {"startup": {"failureThreshold": 10}}},
        {"modelLoad": {}},
        {"podTemplate": {"labels": {"a": "b"}}},
    ):
        spec = InferenceDeploymentSpec.model_validate({**BASE, **extra})
        assert revision.revision(spec, "3", "models:/digits/3", "digits") != before, extra


def test_serving_pods_get_the_inference_priority_class_unless_the_template_names_one() -> None:
    spec = InferenceDeploymentSpec.model_validate(BASE)
    args = ("digits", "ns", spec, "canary", "3", "models:/digits/3", "http://m", None, "digits", "img")
    body = build.deployment(*args, priority_class="slipway-inference")
    assert body["spec"]["template"]["spec"]["priorityClassName"] == "slipway-inference"
    assert "priorityClassName" not in build.deployment(*args)["spec"]["template"]["spec"]
    own = InferenceDeploymentSpec.model_validate({**BASE, "podTemplate": {"priorityClassName": "critical"}})
    body = build.deployment("digits", "ns", own, "canary", "3", "u", None, None, "digits", "img", "slipway-inference")
    assert body["spec"]["template"]["spec"]["priorityClassName"] == "critical"


def test_training_pods_get_the_training_priority_class_unless_the_spec_names_one() -> None:
    from slipway.training import build as trainingrun
    from slipway.training.model import TrainingRunSpec

    spec = TrainingRunSpec.model_validate({"model": {"name": "digits"}, "image": "trainer:1"})
    job = trainingrun.job("run", "ns", spec, None, "slipway-training")
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "slipway-training"
    own = TrainingRunSpec.model_validate({"model": {"name": "digits"}, "image": "t:1", "priorityClassName": "batch"})
    assert (
        trainingrun.job("run", "ns", own, None, "slipway-training")["spec"]["template"]["spec"]["priorityClassName"]
        == "batch"
    )


def test_a_failing_fetch_shows_what_it_said() -> None:
    from slipway.status.pods import pod_problem

    said = "fetching models:/digits/4\nERROR digest mismatch: the files are sha256:ab, the version records sha256:00"
    pod = {
        "metadata": {"name": "digits-canary-x"},
        "status": {
            "initContainerStatuses": [
                {
                    "name": "fetch-model",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
                    "lastState": {"terminated": {"exitCode": 2, "message": said}},
                }
            ],
            "containerStatuses": [{"name": "server", "state": {"waiting": {"reason": "PodInitializing"}}}],
        },
    }
    reason, message = pod_problem([pod])  # type: ignore[misc]
    assert reason == "CrashLoopBackOff"
    assert message.startswith("pod digits-canary-x: init container fetch-model: ERROR digest mismatch")


@pytest.mark.parametrize(
    ("kubelet", "fix"),
    [
        ('container has runAsNonRoot and image will run as root (pod: "digits-stable-x_ns", container: server)',
         "set spec.podTemplate.securityContext.runAsUser (and runAsGroup, fsGroup) to a non-root id"),
        ("container has runAsNonRoot and image has non-numeric user (vllm), cannot verify user is non-root",
         "set spec.podTemplate.securityContext.runAsUser to its numeric id"),
    ],
)  # fmt: skip
def test_a_root_image_refused_by_the_kubelet_names_the_field_to_set(kubelet: str, fix: str) -> None:
    from slipway.status.pods import pod_problem

    waiting = {"reason": "CreateContainerConfigError", "message": kubelet}
    pod = {
        "metadata": {"name": "digits-stable-x"},
        "status": {"containerStatuses": [{"name": "server", "state": {"waiting": waiting}}]},
    }
    reason, message = pod_problem([pod])  # type: ignore[misc]
    assert reason == "CreateContainerConfigError"
    assert message.startswith(f"pod digits-stable-x: {kubelet}; ") and fix in message, message


def test_training_pods_take_the_pod_template_and_the_specs_own_fields_win() -> None:
    from slipway.training import build as trainingrun
    from slipway.training.model import TrainingRunSpec

    spec = TrainingRunSpec.model_validate(
        {
            "model": {"name": "digits"},
            "image": "trainer:1",
            "nodeSelector": {"pool": "a100"},
            "checkpoint": {"size": "1Gi"},
            "podTemplate": {
                "nodeSelector": {"pool": "any", "zone": "z1"},
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                "envFrom": [{"secretRef": {"name": "wandb"}}],
                "serviceAccountName": "trainer",
                "priorityClassName": "batch",
            },
        }
    )
    template = trainingrun.job("run", "ns", spec, None, "slipway-training")["spec"]["template"]
    pod, c = template["spec"], template["spec"]["containers"][0]
    assert pod["nodeSelector"] == {"pool": "a100", "zone": "z1"}
    assert [v["name"] for v in pod["volumes"]] == ["checkpoints", "data"]
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/checkpoints", "/data"]
    assert c["envFrom"] == [{"secretRef": {"name": "wandb"}}] and pod["serviceAccountName"] == "trainer"
    assert pod["priorityClassName"] == "batch"
    with pytest.raises(ValidationError, match="/checkpoints"):
        TrainingRunSpec.model_validate(
            {"model": {"name": "d"}, "image": "t", "checkpoint": {"size": "1Gi"},
             "podTemplate": {"volumeMounts": [{"name": "x", "mountPath": "/checkpoints"}]}}
        )  # fmt: skip


@pytest.mark.parametrize("track", ["stable", "canary"])
def test_drain_gives_both_tracks_a_pre_stop_sleep_and_the_grace_to_finish_requests(track: str) -> None:
    default = pod(track)
    assert server(default)["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert default["spec"]["terminationGracePeriodSeconds"] == 5 + 60
    long = pod(track, drain={"delaySeconds": 10, "maxRequestSeconds": 600})
    assert long["spec"]["terminationGracePeriodSeconds"] == 610
    off = pod(track, drain={"delaySeconds": 0, "maxRequestSeconds": 0})
    assert "lifecycle" not in server(off) and off["spec"]["terminationGracePeriodSeconds"] == 1
    with pytest.raises(ValidationError):
        pod(track, drain={"maxRequestSeconds": -1})


def test_the_hpa_scales_the_whole_inferencedeployment_and_the_split_sets_each_track() -> None:
    spec = InferenceDeploymentSpec.model_validate({**BASE, "autoscaling": {"minReplicas": 2, "maxReplicas": 5}})
    target = build.hpa("digits", "ns", spec)["spec"]["scaleTargetRef"]
    assert target == {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment", "name": "digits"}
    body = build.deployment("digits", "ns", spec, "stable", "3", "models:/digits/3", None, 4, "digits")
    assert body["spec"]["replicas"] == 4
    rolling = body["spec"]["strategy"]["rollingUpdate"]
    assert rolling == {"maxSurge": 1, "maxUnavailable": 0}  # the rollout budget's defaults
