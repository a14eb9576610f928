"""Every reason ``status.lastRollback`` of an InferenceDeployment can give: a canary rolled back
(AnalysisFailed, ProgressDeadlineExceeded, Aborted), a promotion reverted (PromotionFailed,
PromotionAborted), a bake reverted (BakeFailed, Aborted). One list for the rollout, which makes each
record with one of them (mypy checks every call), and for the operator's metrics, which pre-create
a deployment's rollback counters from it and remove them all when it is deleted."""

from __future__ import annotations

from typing import Literal, get_args

RollbackReason = Literal[
    "AnalysisFailed", "ProgressDeadlineExceeded", "Aborted", "PromotionFailed", "PromotionAborted", "BakeFailed"
]
ROLLBACK_REASONS: tuple[RollbackReason, ...] = get_args(RollbackReason)
