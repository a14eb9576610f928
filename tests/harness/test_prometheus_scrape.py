"""The local cluster's Prometheus never scrapes pods of kwok's fake nodes (nothing runs there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localkube.pki import CertPair
from localkube.prometheus import scrape_config


def _node_rules(operator: bool) -> list[dict[str, object]]:
    config = scrape_config("https://127.0.0.1:6443", Path("ca.crt"), CertPair(Path("c.crt"), Path("c.key")), operator)
    rules = config["relabel_configs"]
    assert isinstance(rules, list)
    return [
        r for r in rules if r.get("source_labels") == ["__meta_kubernetes_pod_node_name"] and r.get("action") == "drop"
    ]


@pytest.mark.parametrize("operator", [False, True])
@pytest.mark.parametrize(("node", "dropped"), [("kwok-gpu-0", True), ("kwok-gpu-49", True),
                                               ("slipway-local", False), ("slipway-local-2", False)])  # fmt: skip
def test_pods_of_kwok_nodes_are_dropped(operator: bool, node: str, dropped: bool) -> None:
    (rule,) = _node_rules(operator)
    # Prometheus anchors relabel regexes at both ends.
    assert bool(re.fullmatch(str(rule["regex"]), node)) is dropped
