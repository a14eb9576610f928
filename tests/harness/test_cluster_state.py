"""The local cluster's state.json: components started by different test workers at once each record
their processes without dropping another's (each had loaded the state before the other saved)."""

from __future__ import annotations

from pathlib import Path

from localkube.procs import Proc
from localkube.state import ClusterInfo


def test_two_components_recorded_from_stale_copies_both_stay(tmp_path: Path) -> None:
    ClusterInfo(tmp_path, apiserver_url="https://127.0.0.1:6443", processes=[Proc("etcd", 10, 1)]).save()
    keda, gateway = ClusterInfo.load(tmp_path), ClusterInfo.load(tmp_path)  # both loaded before either saves
    assert keda is not None and gateway is not None
    keda.record([Proc("keda-operator", 20, 2)])
    gateway.record([Proc("inference-envoy", 30, 3), Proc("inference-translator", 31, 3)], gateway_port=8080)
    gateway.record([Proc("inference-envoy", 32, 4)])  # started again: replaced, not added
    state = ClusterInfo.load(tmp_path)
    assert state is not None and state.gateway_port == 8080
    assert sorted((p.name, p.pid) for p in state.processes) == [
        ("etcd", 10), ("inference-envoy", 32), ("inference-translator", 31), ("keda-operator", 20)
    ]  # fmt: skip
    assert {p.name for p in gateway.processes} == {p.name for p in state.processes}
