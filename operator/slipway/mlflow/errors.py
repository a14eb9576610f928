"""MLflow's answers mapped onto Slipway's exceptions, raised by :mod:`slipway.mlflow.http`:

- :class:`MlflowNotFound` — the object does not exist (``RESOURCE_DOES_NOT_EXIST``, and the
  ``INVALID_PARAMETER_VALUE`` that MLflow answers for a missing alias);
- :class:`MlflowUnavailable` — the server cannot be reached, timed out, answered 5xx or 429;
  a retry may succeed (the operator turns it into ``kopf.TemporaryError``);
- :class:`MlflowError` — anything else (bad request, permission denied, ...).

What a server answers never reaches a message (and so never status, conditions or Events):
an error names the request, the HTTP status and MLflow's ``error_code`` (a fixed vocabulary),
in words of Slipway's own; MLflow's free-text explanation goes to the debug log only.
"""

from __future__ import annotations

import logging
import re

import httpx

log = logging.getLogger(__name__)

# The one thing an error repeats of an answer: an error_code shaped like MLflow's.
_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
# MLflow's error codes in words (an unknown code is still shown, in brackets, after the words).
_CODE_WORDS = {
    "RESOURCE_DOES_NOT_EXIST": "not found",
    "RESOURCE_ALREADY_EXISTS": "already exists",
    "INVALID_PARAMETER_VALUE": "a parameter was refused as invalid",
    "BAD_REQUEST": "refused as a bad request",
    "INVALID_STATE": "refused: the object is not in a state that allows it",
    "PERMISSION_DENIED": "permission denied",
    "UNAUTHENTICATED": "not authenticated",
}


class MlflowError(Exception):
    """An MLflow request failed; ``status`` is the HTTP status (None if no answer arrived)."""

    def __init__(self, message: str, *, status: int | None = None, error_code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_code = error_code

    def __str__(self) -> str:
        code = f" [{self.error_code}]" if self.error_code else ""
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.message}{code}{status}"


class MlflowNotFound(MlflowError):
    """The experiment, run, model, version, alias or artifact does not exist."""


class MlflowUnavailable(MlflowError):
    """MLflow could not answer now (connection error, timeout, 5xx, 429); retrying may help."""


class MlflowAnswerTooLarge(MlflowError):
    """An answer went past :data:`slipway.mlflow.http.MAX_ANSWER_BYTES`; what was read of it is dropped."""


class LeaseDeadlinePassed(MlflowUnavailable):
    """A write not started (or cut) because this replica's Lease is past its renew deadline."""


def _mlflow_error(response: httpx.Response) -> tuple[str, str]:
    """(error_code, explanation) of an MLflow error answer; ("", "") for any other answer. The
    explanation is free text: it may decide which exception is raised, never what it says."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return "", ""
    if not isinstance(body, dict):
        return "", ""
    code, explanation = body.get("error_code"), body.get("message")
    code = code if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else ""
    return code, explanation if isinstance(explanation, str) else ""


def raise_for_answer(response: httpx.Response, what: str, server: str) -> None:
    """Map a failed answer to an exception. ``server`` is the (redacted) address for messages."""
    if response.is_success:
        return
    status = response.status_code
    error_code, explanation = _mlflow_error(response)
    if explanation:
        log.debug("MLflow's explanation of %s (HTTP %d %s): %.300r", what, status, error_code, explanation)
    if status == 500 and error_code == "INTERNAL_ERROR" and "No such file or directory" in explanation:
        # MLflow before 3.1 answers the download of an absent artifact with 500, not 404.
        raise MlflowNotFound(f"MLflow {what}: not found", status=status, error_code=error_code)
    if status >= 500 or status == 429:
        raise MlflowUnavailable(f"MLflow at {server} could not serve {what} now", status=status, error_code=error_code)
    words = _CODE_WORDS.get(error_code) or ("not found" if status == 404 else "refused")
    text = f"MLflow {what}: {words}"
    if status in (401, 403):
        text += " (check MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD)"
    elif not error_code:
        text += " without an MLflow error (an MLflow without this endpoint, or not MLflow at that address?)"
    if status == 404 or error_code == "RESOURCE_DOES_NOT_EXIST":
        raise MlflowNotFound(text, status=status, error_code=error_code)
    if error_code == "INVALID_PARAMETER_VALUE" and "/registered-models/alias" in what and "not found" in explanation:
        # MLflow answers a missing alias with 400 INVALID_PARAMETER_VALUE, not 404.
        raise MlflowNotFound(f"MLflow {what}: not found", status=status, error_code=error_code)
    raise MlflowError(text, status=status, error_code=error_code)
