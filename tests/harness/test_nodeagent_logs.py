"""Container log files in the CRI format, written by pumping a real process's pipes and read
back as ``kubectl logs`` asks (tail, since, timestamps, limit, partial lines, follow);
the kubelet API's resource metrics from a real process tree."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from localkube.nodeagent import logs
from localkube.nodeagent.kubelet import ContainerView, resource_metrics, session_usage
from localkube.wait import wait_for


def run_into_log(path: Path, script: str) -> None:
    writer = logs.LogWriter(path)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    writer.pump(proc.stdout, "stdout")
    writer.pump(proc.stderr, "stderr")
    proc.wait()
    writer.wait(5)


def test_lines_from_both_streams_are_stamped_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    run_into_log(path, "import sys; print('one'); print('two', file=sys.stderr, flush=True); print('three')")
    raw = path.read_text().splitlines()
    assert {line.split(" ")[1] for line in raw} == {"stdout", "stderr"}
    assert all(line.split(" ")[2] == "F" for line in raw)
    text = b"".join(logs.read(path)).decode().splitlines()
    assert sorted(text) == ["one", "three", "two"]
    assert b"".join(logs.read(path, tail_lines=1)) in (b"three\n", b"two\n")
    assert b"".join(logs.read(path, tail_lines=0)) == b""
    assert b"".join(logs.read(path, limit_bytes=5)) == b"".join(logs.read(path))[:5]


def test_since_selects_by_the_time_each_line_was_written(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    run_into_log(path, "import time; print('early', flush=True); time.sleep(1.2); print('late', flush=True)")
    stamps = [logs.parse_time(line.split(" ")[0]) for line in path.read_text().splitlines()]
    assert stamps[1] - stamps[0] >= 1.1
    assert b"".join(logs.read(path, since=stamps[0] + 0.6)) == b"late\n"
    with_time = b"".join(logs.read(path, timestamps=True)).decode().splitlines()
    assert with_time[1].endswith(" late") and abs(logs.parse_time(with_time[1].split(" ")[0]) - stamps[1]) < 1e-6


def test_a_line_longer_than_the_limit_is_split_into_partials_and_joined_again(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    run_into_log(path, f"print('x' * {logs.MAX_LINE * 2 + 10})")
    tags = [line.split(" ")[2] for line in path.read_text().splitlines()]
    assert tags == ["P", "P", "F"]
    assert b"".join(logs.read(path)) == b"x" * (logs.MAX_LINE * 2 + 10) + b"\n"


def test_follow_yields_new_lines_until_the_writer_stops(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    writer = logs.LogWriter(path)
    script = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.4)\n"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    writer.pump(proc.stdout, "stdout")
    writer.pump(proc.stderr, "stderr")
    got: list[tuple[bytes, float]] = []
    start = time.monotonic()

    def follow() -> None:
        for chunk in logs.read(path, follow=True, running=lambda: proc.poll() is None):
            got.append((chunk, time.monotonic() - start))

    reader = threading.Thread(target=follow)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "follow ended once the process exited"
    assert [c for c, _ in got] == [b"0\n", b"1\n", b"2\n"]
    assert got[-1][1] - got[0][1] >= 0.6  # streamed as written, not at the end


def test_resource_metrics_measure_a_process_tree(tmp_path: Path) -> None:
    # 0.6 s of CPU, however long a busy machine takes to give it, then idle until killed.
    burn = "import time\nwhile time.process_time() < 0.6:\n    pass\ntime.sleep(120)\n"
    proc = subprocess.Popen([sys.executable, "-c", burn], start_new_session=True)
    try:
        wait_for(lambda: session_usage(proc.pid)[0] >= 0.5, 60, "half a CPU-second burnt")
        cpu, rss = session_usage(proc.pid)
        assert cpu >= 0.5 and rss > 1 << 20
        view = ContainerView("ns", "pod", "main", tmp_path, proc.pid, "2026-12-01T00:00:00Z")
        text = resource_metrics([view])
        line = next(x for x in text.splitlines() if x.startswith("container_cpu_usage_seconds_total{"))
        assert 'container="main",namespace="ns",pod="pod"' in line
        assert float(line.split()[1]) >= 0.5
        pod_mem = next(x for x in text.splitlines() if x.startswith('pod_memory_working_set_bytes{namespace="ns"'))
        assert int(pod_mem.split()[1]) > 1 << 20
        assert "node_cpu_usage_seconds_total" in text and "container_start_time_seconds{" in text
    finally:
        proc.kill()
        proc.wait()
