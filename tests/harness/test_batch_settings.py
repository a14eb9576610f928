"""The local cluster's batch system is started again when what it runs with changes: a Kueue left
running by an earlier checkout (without its plain-pod integration, say) would otherwise stay."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from localkube.batch import JOBSET, KUEUE, Ports


def test_a_component_s_digest_ignores_ports_and_paths_but_not_its_settings_or_webhooks() -> None:
    assert KUEUE.digest() == KUEUE.digest()
    assert KUEUE.settings(Path("/a"), Ports(1, 2, 3, 4)) != KUEUE.settings(Path("/b"), Ports(5, 6, 7, 8))
    without_pods = dataclasses.replace(
        KUEUE, settings=lambda d, p: {**KUEUE.settings(d, p), "integrations": {"frameworks": ["batch/job"]}}
    )
    assert without_pods.digest() != KUEUE.digest()
    assert dataclasses.replace(KUEUE, webhook_overrides=()).digest() != KUEUE.digest()
    assert JOBSET.digest() != KUEUE.digest()
