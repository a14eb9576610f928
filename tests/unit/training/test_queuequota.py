"""The most a Kueue ClusterQueue can ever admit for one Workload (slipway.training.queuequota), and a run
asking for more: Stalled with the numbers, Queued again once the quota grows."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest

from slipway.training import kueue
from slipway.training.model import TrainingRunSpec
from slipway.training.queuequota import Quota, quota
from slipway.training.state import QUOTA_RECHECK_SECONDS, training_state

GPU = "nvidia.com/gpu"


def cluster_queue(name: str, flavors: dict[str, dict[str, Any]], cohort: str | None = None) -> dict[str, Any]:
    """A ClusterQueue whose one resource group covers cpu and GPUs; ``flavors``: flavor -> the GPU entry."""
    spec: dict[str, Any] = {
        "resourceGroups": [{
            "coveredResources": ["cpu", GPU],
            "flavors": [{"name": f, "resources": [{"name": "cpu", "nominalQuota": 64}, {"name": GPU, **entry}]}
                        for f, entry in flavors.items()],
        }],
    }  # fmt: skip
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def test_without_a_cohort_the_most_is_the_best_flavors_nominal_quota():
    found = quota(cluster_queue("cq", {"a100": {"nominalQuota": 3}, "h100": {"nominalQuota": "2"}}), [], GPU)
    assert found is not None and (found.most, found.flavor, found.borrowable) == (3, "a100", 0)
    assert found.refusal(Decimal(3), "spec.resources.gpus") is None
    said = found.refusal(Decimal(4), "spec.resources.gpus")
    assert said == (
        "spec.resources.gpus asks for 4 nvidia.com/gpu in all, more than Kueue can ever admit (ClusterQueue cq, "
        "flavor a100: nominal quota 3, 3 at most); ask for 3 or fewer, or a cluster admin raises the quota (the run "
        "is Queued again once it fits)"
    )


def test_in_a_cohort_it_may_borrow_what_the_others_lend_within_its_borrowing_limit():
    mine = cluster_queue("training", {"a100": {"nominalQuota": 0}}, cohort="team")
    serving = cluster_queue("serving", {"a100": {"nominalQuota": 4}}, cohort="team")
    lender = cluster_queue("lender", {"a100": {"nominalQuota": 8, "lendingLimit": 2}}, cohort="team")
    elsewhere = cluster_queue("elsewhere", {"a100": {"nominalQuota": 100}}, cohort="other")
    queues = [mine, serving, lender, elsewhere]
    found = quota(mine, queues, GPU)
    assert found is not None and (found.most, found.nominal, found.borrowable) == (6, 0, 6)  # 4 + 2 lent
    assert "nominal quota 0 plus 6 it may borrow in cohort team, 6 at most" in (found.refusal(Decimal(7), "f") or "")
    limited = cluster_queue("training", {"a100": {"nominalQuota": 1, "borrowingLimit": 2}}, cohort="team")
    found = quota(limited, [limited, serving, lender], GPU)
    assert found is not None and found.most == 3  # its 1 + at most 2 borrowed
    # Another flavor of the cohort lends nothing to this one.
    other_flavor = cluster_queue("serving", {"h100": {"nominalQuota": 4}}, cohort="team")
    assert quota(mine, [mine, other_flavor], GPU) == Quota("training", GPU, Decimal(0), "a100", Decimal(0),
                                                           Decimal(0), "team")  # fmt: skip


def test_a_queue_that_does_not_cover_the_resource_holds_none_of_it_and_one_that_does_not_parse_is_not_judged():
    cpu_only = {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": 8}]}]}]}}  # fmt: skip
    found = quota(cpu_only, [], GPU)
    assert found is not None and found.most == 0 and "(none covers it)" in (found.refusal(Decimal(1), "f") or "")
    assert quota(cluster_queue("cq", {"a100": {"nominalQuota": "lots"}}), [], GPU) is None
    assert quota(cluster_queue("cq", {"a100": {"nominalQuota": 3, "borrowingLimit": "x"}}, "c"), [], GPU) is None


@pytest.mark.parametrize(("asked", "fits"), [(Decimal(3), True), (Decimal("3.5"), False), (Decimal(0), True)])
def test_what_fits_is_at_most_the_most(asked, fits):
    found = quota(cluster_queue("cq", {"a100": {"nominalQuota": 3}}), [], GPU)
    assert found is not None and (found.refusal(asked, "f") is None) == fits


def test_a_queued_run_its_quota_can_never_hold_is_stalled_with_the_numbers_and_looks_again():
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "queueName": "gpus",
                                           "resources": {"gpus": 4}})  # fmt: skip
    job = {"metadata": {"name": "r-train", "uid": "u"}, "spec": {"suspend": True}, "status": {}}
    seen = kueue.QueueView("job-r-train-1", None, False, None, False, "insufficient quota", None, 0)
    found = quota(cluster_queue("cq", {"a100": {"nominalQuota": 3}}), [], GPU)
    assert found is not None
    stalled = training_state(spec, job, [], queue=dataclasses.replace(seen, exceeds=found.refusal(Decimal(4), "f")))
    conditions = {c.type: c for c in stalled.conditions}
    assert (conditions["Stalled"].status, conditions["Reconciling"].status) == ("True", "False")
    assert conditions["Ready"].reason == "ExceedsQueueQuota" and "nominal quota 3" in conditions["Ready"].message
    assert stalled.recheck_seconds == QUOTA_RECHECK_SECONDS
    queued = training_state(spec, job, [], queue=seen)  # the quota grew: Queued, in progress again
    conditions = {c.type: c for c in queued.conditions}
    assert (conditions["Stalled"].status, conditions["Reconciling"].status, conditions["Ready"].reason) == (
        "False", "True", "Queued")  # fmt: skip
