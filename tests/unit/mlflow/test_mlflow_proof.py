"""The proofs Slipway writes on what it creates in MLflow (slipway.mlflow.proof): what they cover,
that copied tags prove nothing on another object, that proofs are enforced where the allow-list is,
that an admin's opt-in and the object's own status are the only ways around them, and that a
TrainingRun adopts only a predecessor's proven run (and one left RUNNING without a checkpoint)."""

from __future__ import annotations

from typing import Any

import pytest

from slipway.mlflow import PROOF_TAG, Guard, Proof, Run, Unproven
from slipway.mlflow.proof import NAMESPACE_TAG
from slipway.tenancy import ADOPT_MLFLOW_NAMES, ALLOWED_MODELS, Policy
from slipway.training import adopt

KEY = Proof(b"k" * 32)
OTHER_KEY = Proof(b"x" * 32)


def guard(enforce: bool = True, proof: Proof | None = KEY, **kw: Any) -> Guard:
    return Guard(proof, "acme", "acme/digits", enforce, **kw)


def test_a_proof_needs_the_key_and_covers_every_part():
    value = KEY.of("run", "acme/digits", "1", "abc", "", "w")
    assert KEY.holds(value, "run", "acme/digits", "1", "abc", "", "w")
    assert not OTHER_KEY.holds(value, "run", "acme/digits", "1", "abc", "", "w")
    for changed in (("acme/other", "1", "abc", "", "w"), ("acme/digits", "2", "abc", "", "w"),
                    ("acme/digits", "1", "abd", "", "w"), ("acme/digits", "1", "abc", "", "v")):  # fmt: skip
        assert not KEY.holds(value, "run", *changed)
    # Length-prefixed: parts that join to the same text sign differently.
    assert KEY.of("model", "ab", "c") != KEY.of("model", "a", "bc")
    assert not KEY.holds("", "model", "a") and not KEY.holds(None, "model", "a")
    assert "k" * 32 not in repr(KEY)
    with pytest.raises(ValueError):
        Proof(b"short")


def test_an_experiment_or_model_is_proven_by_its_tags_for_any_namespace_that_made_it():
    made = guard().named_tags("model", "acme-new")
    assert made[NAMESPACE_TAG] == "acme"
    other_namespace = Guard(KEY, "acme-staging", "acme-staging/x", True)
    assert other_namespace.named_holds("model", "acme-new", made)  # made for acme, shared by the admin's globs
    assert not guard().named_holds("model", "acme-other", made)  # copied onto another name
    assert not guard().named_holds("experiment", "acme-new", made)  # another kind
    forged = {NAMESPACE_TAG: "acme", PROOF_TAG: OTHER_KEY.of("model", "acme", "acme-new")}
    assert not guard().named_holds("model", "acme-new", forged)


def test_an_unproven_name_is_refused_where_enforced_unless_trusted_or_opted_in():
    with pytest.raises(Unproven) as refused:
        guard().needs_stamp("model", "acme-new", {})
    assert "acme-new" in str(refused.value) and "slipway.dev/adopt-mlflow-names" in str(refused.value)
    assert refused.value.reason == "MlflowObjectNotProven"
    assert guard(enforce=False).needs_stamp("model", "acme-new", {}) is False  # single-team: used as before
    assert guard(trusted=frozenset({"model:acme-new"})).needs_stamp("model", "acme-new", {}) is True
    assert guard(opted_in=("acme-legacy-*",)).needs_stamp("experiment", "acme-legacy-1", {}) is True
    with pytest.raises(Unproven):
        guard(opted_in=("acme-legacy-*",)).needs_stamp("experiment", "acme-new", {})
    proven = guard().named_tags("experiment", "acme-new")
    assert guard().needs_stamp("experiment", "acme-new", proven) is False
    assert guard(proof=None).needs_stamp("model", "acme-new", {}) is False  # no key: nothing to check against


def test_run_and_version_proofs_are_bound_to_their_ids():
    g = guard()
    tags = {PROOF_TAG: g.run_proof("7", "run-a", "", "work")}
    assert g.run_holds("7", "run-a", tags, "", "work")
    assert not g.run_holds("7", "run-b", tags, "", "work")  # the tags copied onto a planted run
    assert not g.run_holds("8", "run-a", tags, "", "work")
    assert not Guard(KEY, "t2", "t2/digits", True).run_holds("7", "run-a", tags, "", "work")
    assert guard(enforce=False).run_holds("7", "run-b", {}, "", "work")
    version = {PROOF_TAG: g.version_proof("acme-new", "1", "source", "work")}
    assert g.version_holds("acme-new", "1", version, "source", "work")
    assert not g.version_holds("acme-new", "2", version, "source", "work")


def test_the_policy_enforces_where_the_allow_list_applies_and_reads_the_admins_opt_in():
    namespace = {"metadata": {"annotations": {ALLOWED_MODELS: "acme-*", ADOPT_MLFLOW_NAMES: "acme-legacy"}}}
    policy = Policy.of("acme", namespace, False, (), ("shared-*",))
    g = policy.guard(KEY, "acme/digits", ["model:acme-x"])
    assert g.enforce and g.trusts("model", "acme-legacy") and g.trusts("model", "shared-embeddings")
    assert g.trusts("model", "acme-x") and not g.trusts("model", "acme-new")
    assert not Policy.of("acme", {}, False).guard(KEY, "acme/digits").enforce  # single-team
    assert Policy.of("acme", {}, True).guard(KEY, "acme/digits").enforce  # --require-model-allowlist


class Runs:
    """search_runs over a fixed list (the unit under test is the choice, not MLflow's filter)."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs

    def search_runs(self, experiment_ids: list[str], filter: str = "") -> list[Run]:
        return list(self.runs)


def run(run_id: str, status: str, start: int, g: Guard | None, checkpoint: str | None = None) -> Run:
    tags = {adopt.TRAININGRUN_TAG: "acme/digits", "slipway.dev/work": "w"}
    if checkpoint is not None:
        tags[adopt.CHECKPOINT_STEP_TAG] = checkpoint
    if g is not None:
        tags[PROOF_TAG] = g.run_proof("7", run_id, "", "w")
    return Run(run_id, "7", "", status, "", start_time=start, tags=tags)


def test_a_trainingrun_adopts_only_a_proven_run_and_one_left_running_without_a_checkpoint():
    g = guard()
    planted = run("planted", "FINISHED", 1, None)  # the owner tag and work key copied, no proof
    copied = Run("copied", "7", "", "FINISHED", "", start_time=0,
                 tags={**run("mine", "RUNNING", 5, g).tags})  # a real run's proof copied  # fmt: skip
    mine = run("mine", "RUNNING", 5, g)
    found = adopt.adoptable(Runs([planted, copied, mine]), "7", "acme/digits", "w", g)  # type: ignore[arg-type]
    assert found is not None and found.run_id == "mine"  # left RUNNING, never checkpointed: goes on in it
    assert adopt.adoptable(Runs([planted, copied]), "7", "acme/digits", "w", g) is None  # type: ignore[arg-type]
    # Single-team mode: as before, the planted FINISHED run would be taken (no proofs to check).
    loose = adopt.adoptable(Runs([planted, mine]), "7", "acme/digits", "w", guard(enforce=False))  # type: ignore[arg-type]
    assert loose is not None and loose.run_id == "planted"
    # A checkpointed run is still preferred to one that never checkpointed; FAILED without one is new work.
    cut = run("cut", "FAILED", 9, g, checkpoint="4")
    assert adopt.adoptable(Runs([mine, cut]), "7", "acme/digits", "w", g).run_id == "cut"  # type: ignore[arg-type,union-attr]
    failed = run("failed", "FAILED", 9, g)
    assert adopt.adoptable(Runs([failed]), "7", "acme/digits", "w", g) is None  # type: ignore[arg-type]
