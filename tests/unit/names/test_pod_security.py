"""Every pod Slipway builds passes the restricted Pod Security Standard; podTemplate adds to it."""

from __future__ import annotations

from typing import Any

import pytest

from slipway.artifact import build as ma
from slipway.inference import build as idep
from slipway.inference.model import InferenceDeploymentSpec
from slipway.training import build as tr
from slipway.training.model import TrainingRunSpec


def pods(pod_template: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    extra = {"podTemplate": pod_template} if pod_template else {}
    training = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "img:1", "nodes": 2,
                                               "checkpoint": {"size": "1Gi"}, **extra})  # fmt: skip
    serving = InferenceDeploymentSpec.model_validate({"model": {"name": "m", "alias": "a"}, "image": "img:1",
                                                      "modelLoad": {"cacheClaimName": "c"}, **extra})  # fmt: skip
    step = {"image": "img:1", "command": None, "args": None, "env": {}}
    return {
        "training": tr.job("run", "ns", training, None)["spec"]["template"]["spec"],
        "quantize": ma.step_job("art", "ns", "quantize", **step)["spec"]["template"]["spec"],
        "validate": ma.step_job("art", "ns", "validate", **step)["spec"]["template"]["spec"],
        "serving": idep.deployment("d", "ns", serving, "stable", "1", "models:/m/1", None, None)["spec"]["template"][
            "spec"
        ],
    }


def restricted_problems(pod: dict[str, Any]) -> list[str]:
    """What the restricted profile (Pod Security Standards, v1.35) would refuse in ``pod``."""
    problems = []
    pod_context = pod.get("securityContext") or {}
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    for c in containers:
        context = {**pod_context, **(c.get("securityContext") or {})}
        name = c["name"]
        if context.get("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot")
        if context.get("runAsUser") == 0:
            problems.append(f"{name}: runAsUser 0")
        if (context.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile")
        if c.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation")
        if "ALL" not in ((c.get("securityContext") or {}).get("capabilities") or {}).get("drop", []):
            problems.append(f"{name}: capabilities.drop ALL")
        added = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        if set(added) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities.add {added}")
        if c.get("securityContext", {}).get("privileged"):
            problems.append(f"{name}: privileged")
    for volume in pod.get("volumes", []):
        if set(volume) - {"name"} - {"emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected",
                                      "downwardAPI", "ephemeral", "csi"}:  # fmt: skip
            problems.append(f"volume {volume['name']}")
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        problems.append("host namespaces")
    return problems


@pytest.mark.parametrize("kind", ["training", "quantize", "validate", "serving"])
def test_every_pod_slipway_builds_passes_restricted(kind):
    pod = pods()[kind]
    assert restricted_problems(pod) == []
    if kind == "serving":
        assert [c["name"] for c in pod["initContainers"]] == ["fetch-model"]  # checked too


@pytest.mark.parametrize("kind", ["training", "serving"])
def test_pod_template_adds_security_settings_over_the_defaults(kind):
    given = {"securityContext": {"runAsUser": 1000, "fsGroup": 2000},
             "containerSecurityContext": {"readOnlyRootFilesystem": True}}  # fmt: skip
    pod = pods(given)[kind]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                                      "runAsUser": 1000, "fsGroup": 2000}  # fmt: skip
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert restricted_problems(pod) == []
