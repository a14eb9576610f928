"""A first revision that never has a ready pod (its server crashes on start, as an image the kubelet
refuses never starts): the fix applied to the spec replaces it on the stable track directly, as a
first revision goes, and is promoted; no canary waits for an analysis with nothing to compare."""

from __future__ import annotations

import pytest

from slipway_testing import Versions, apply_object, condition, deployment, patch_spec, report, wait_status

pytestmark = [pytest.mark.cluster]

BROKEN = ["python", "-c", "raise SystemExit('a server that never starts')"]


def test_a_fix_for_a_first_revision_that_never_served_replaces_it_without_a_canary(
    kube_api, namespace, operator, mlflow, trained
):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model)
    serve = body["spec"]["command"]
    body["spec"]["command"] = BROKEN
    apply_object(kube_api, namespace, body)

    def crashing(obj: dict) -> bool:
        ready = condition(obj, "Ready")
        return ready.get("reason") == "RollingOut" and "CrashLoopBackOff" in ready.get("message", "")

    refused = wait_status(kube_api, namespace, "InferenceDeployment", "digits", crashing, 120, "its pods crashing")
    patch_spec(kube_api, namespace, {"command": serve})
    seen: list[str] = []

    def promoted(obj: dict) -> bool:
        status = obj.get("status") or {}
        if (status.get("canary") or {}).get("revision"):
            seen.append(str(status["canary"]["revision"]))
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == v1

    served = wait_status(kube_api, namespace, "InferenceDeployment", "digits", promoted, 120, "the fix promoted")
    report(f"\nfirst revision never ready: {condition(refused, 'Ready')['message']}\nthen: "
           f"{condition(served, 'Ready')['message']}")  # fmt: skip
    assert seen == [], f"a canary was started for the fix: {seen}"
    assert served["status"]["stable"]["revision"] != refused["status"]["stable"]["revision"]
