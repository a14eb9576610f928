"""kopf handlers of TrainingRun."""

from __future__ import annotations

from typing import Any

import kopf

from slipway import GROUP, VERSION, metrics
from slipway.handlers.common import InvalidSpec, parse_spec, write_status
from slipway.models import TrainingRunSpec
from slipway.status.conditions import reconciling, stalled

KIND = "TrainingRun"
PLURAL = "trainingruns"


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """Check the spec beyond the schema and report honestly what the operator does with it."""
    with metrics.reconcile_timer(KIND):
        try:
            parse_spec(TrainingRunSpec, body)
        except InvalidSpec as exc:
            write_status(KIND, body, patch, stalled("InvalidSpec", str(exc)))
            return
        write_status(
            KIND,
            body,
            patch,
            reconciling(
                "NotImplemented",
                "the spec is valid; this version of Slipway does not act on TrainingRuns yet",
            ),
        )
