"""Every reason ``status.lastRollback`` of an InferenceDeployment can give: a canary rolled back
(AnalysisFailed, ProgressDeadlineExceeded, Aborted), a promotion reverted (PromotionFailed,
PromotionAborted), a bake reverted (BakeFailed, Aborted). They are rows of the reasons registry
(slipway.reasons, marked ``rollback``); the rollout makes each record with one of them (mypy checks
every call), and the operator's metrics pre-create a deployment's rollback counters from them."""

from __future__ import annotations

from slipway.reasons import ROLLBACK_REASONS, RollbackReason

__all__ = ["ROLLBACK_REASONS", "RollbackReason"]
