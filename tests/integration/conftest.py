"""Shared settings of the integration tests (the operator fixture is in tests/conftest.py)."""

from __future__ import annotations

import os

# MLflow sends no events: in tests the operator looks at aliases and training progress every 2 s.
os.environ.setdefault("SLIPWAY_ALIAS_POLL_SECONDS", "2")
os.environ.setdefault("SLIPWAY_PROGRESS_POLL_SECONDS", "2")
