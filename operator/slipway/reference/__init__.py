"""The generated pages of the documentation's reference (``docs/reference/``), each from the code it
describes: the API of the three kinds from the pydantic models (through the CRD generator), the
operator's metrics, the condition reasons (slipway.reasons), the operator's settings
(slipway.settings), the ``slipway.dev/`` labels and annotations, the MLflow tags
(slipway.mlflow.tags), the contract of each program Slipway runs (``programs/``, from the builders)
and the kubectl plugin's help.

    python -m slipway.reference docs/reference          # write the pages (make reference)
    python -m slipway.reference --check docs/reference  # exit 1 if a committed page is stale"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial


def pages() -> dict[str, Callable[[], str]]:
    """Each page's file name under docs/reference/ and the function that writes it."""
    from slipway import reasons, settings
    from slipway.reference import api, kubectl, labels, metrics, mlflowtags, programs

    return {
        **{f"{kind.kind.lower()}.md": partial(api.markdown, kind) for kind in api.KINDS},
        "reasons.md": reasons.markdown,
        "settings.md": settings.markdown,
        "metrics.md": metrics.markdown,
        "labels.md": labels.markdown,
        "mlflow-tags.md": mlflowtags.markdown,
        **{f"programs/{name}.md": page for name, page in programs.PAGES.items()},
        "kubectl-slipway.md": kubectl.markdown,
    }
