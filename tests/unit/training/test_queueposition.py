"""A queued run's place in its LocalQueue: Kueue's visibility API read once per LocalQueue per TTL
and shared by every pass that asks meanwhile; a Kueue that cannot say costs no pass anything."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from slipway.training import kueue, queueposition
from slipway.training.queueposition import Place, Position

SUMMARY = {
    "kind": "PendingWorkloadsSummary",
    "items": [
        {"metadata": {"name": "job-a-train-1"}, "positionInLocalQueue": 0, "positionInClusterQueue": 4},
        {"metadata": {"name": "job-b-train-2"}, "positionInLocalQueue": 1, "positionInClusterQueue": 7},
        {"metadata": {"name": "broken"}, "positionInLocalQueue": "x"},
    ],
}


class Answer:
    def __init__(self, status: int, body: Any) -> None:
        self.status, self.data = status, json.dumps(body).encode()

    def read(self) -> None:
        pass


class VisibilityApi:
    """The ApiClient calls queueposition makes, answered from a fixed summary."""

    def __init__(self, status: int = 200, body: Any = SUMMARY) -> None:
        self.status, self.body, self.paths = status, body, []
        self.release, self.started = threading.Event(), threading.Event()
        self.release.set()

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
        self.paths.append(path)
        self.started.set()
        return (method, path, {}, None, [])

    def call_api(self, *request: Any, _request_timeout: float) -> Answer:
        self.release.wait(5)  # a read that hangs until the test lets it answer
        return Answer(self.status, self.body)


@pytest.fixture(autouse=True)
def fresh() -> Any:
    queueposition.forget()
    yield
    queueposition.forget()


def test_positions_count_from_one_and_a_malformed_item_is_skipped() -> None:
    assert queueposition.parse(SUMMARY) == {"job-a-train-1": Position(1, 5), "job-b-train-2": Position(2, 8)}


def test_one_read_per_local_queue_per_ttl_whoever_asks() -> None:
    api, now = VisibilityApi(), [100.0]

    def ask(workload: str, queue: str = "gpus") -> Place:
        return queueposition.place_of(api, "team-a", queue, workload, lambda: now[0])

    assert ask("job-a-train-1") == Place(True, Position(1, 5))
    assert ask("job-b-train-2") == Place(True, Position(2, 8))
    assert ask("job-c-train-3") == Place(True, None)  # not pending (admitted, or not seen by Kueue yet)
    assert api.paths == ["/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/gpus/pendingworkloads"]
    ask("job-a-train-1", queue="cpus")  # another LocalQueue: its own read
    now[0] += queueposition.TTL_SECONDS - 1
    ask("job-a-train-1")
    assert len(api.paths) == 2
    now[0] += 1  # counted from when the answer came
    ask("job-a-train-1")
    assert len(api.paths) == 3


def test_passes_that_ask_while_it_is_read_wait_for_that_read() -> None:
    api = VisibilityApi()
    api.release.clear()
    found: list[Place] = []

    def ask() -> None:
        found.append(queueposition.place_of(api, "ns", "q", "job-a-train-1"))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    api.release.set()
    for thread in threads:
        thread.join(10)
    assert found == [Place(True, Position(1, 5))] * 4 and len(api.paths) == 1


def test_a_visibility_api_that_does_not_answer_holds_a_pass_at_most_the_short_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queueposition, "TIMEOUT_SECONDS", 0.2)
    api = VisibilityApi()
    api.release.clear()  # the first asker's read hangs (in its own thread here)
    asker = threading.Thread(target=lambda: queueposition.place_of(api, "ns", "q", "w"))
    asker.start()
    assert api.started.wait(5)  # the read is under way
    assert queueposition.place_of(api, "ns", "q", "w") == Place(False)  # waited 0.2 s, no position
    api.release.set()
    asker.join(10)


@pytest.mark.parametrize(
    ("status", "body"),
    [(404, {"kind": "Status"}), (403, {"kind": "Status"}), (200, "text"), (200, {"items": None})],
)
def test_a_kueue_that_cannot_say_gives_no_position_and_is_asked_again_only_after_a_minute(
    status: int, body: Any
) -> None:
    api, now = VisibilityApi(status, body), [0.0]
    assert queueposition.place_of(api, "ns", "q", "job-a-train-1", lambda: now[0]) == Place(False)
    now[0] += queueposition.TTL_SECONDS
    assert queueposition.place_of(api, "ns", "q", "job-a-train-1", lambda: now[0]) == Place(False)
    assert len(api.paths) == 1  # a failure is kept longer than an answer
    now[0] += queueposition.FAILED_TTL_SECONDS
    queueposition.place_of(api, "ns", "q", "job-a-train-1", lambda: now[0])
    assert len(api.paths) == 2


def test_the_answers_of_queues_no_pass_asks_for_any_more_are_dropped() -> None:
    """A tenant may name any queue: what is kept is bounded by the queues asked for in the last minute."""
    api, now = VisibilityApi(), [0.0]
    for i in range(50):
        queueposition.place_of(api, "ns", f"q-{i}", "w", lambda: now[0])
    assert len(queueposition._READS) == 50
    now[0] += queueposition.TTL_SECONDS
    queueposition.place_of(api, "ns", "q-0", "w", lambda: now[0])  # read again: the 49 others are stale
    assert set(queueposition._READS) == {("ns", "q-0")} and len(api.paths) == 51


def test_a_failing_queue_is_logged_once_per_outage_and_forgotten_with_its_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, now = VisibilityApi(404, {"kind": "Status"}), [0.0]
    with caplog.at_level("INFO", logger=queueposition.__name__):
        for _ in range(3):  # still failing a minute later, and a minute after that: one line
            queueposition.place_of(api, "ns", "q", "w", lambda: now[0])
            now[0] += queueposition.FAILED_TTL_SECONDS
        queueposition.place_of(api, "ns", "other", "w", lambda: now[0])  # q's read has expired: both dropped
    assert len(api.paths) == 4
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "no queue positions for LocalQueue ns/q from Kueue's visibility API",
        "no queue positions for LocalQueue ns/other from Kueue's visibility API",
    ]
    assert set(queueposition._READS) == {("ns", "other")}
    assert set(queueposition._FAILING) == {("ns", "other")}


def test_names_that_need_escaping_stay_in_their_path_segment() -> None:
    api = VisibilityApi()
    queueposition.place_of(api, "ns", "a/../../b", "w")
    assert api.paths[0].endswith("/localqueues/a%2F..%2F..%2Fb/pendingworkloads")


def test_the_position_is_shown_while_queued_and_dropped_once_admitted() -> None:
    queued = kueue.QueueView("job-a-train-1", None, False, None, False, "insufficient quota", None, 0, 3, 9)
    reason, message = kueue.queued("gpus", queued)
    assert reason == "Queued" and "(LocalQueue gpus, position 3): insufficient quota" in message
    assert kueue.queue_status("gpus", queued)["position"] == 3
    assert kueue.queue_status("gpus", queued)["positionInClusterQueue"] == 9
    admitted = kueue.QueueView("job-a-train-1", "cq", True, "2026-12-03T10:00:00Z", True, None, None, 0, 3, 9)
    assert "position" not in kueue.queue_status("gpus", admitted)
    unknown = kueue.QueueView("job-a-train-1", None, False, None, False, None, None, 0)
    assert "position" not in kueue.queued("gpus", unknown)[1]
