"""The whole test suite in the order that gives feedback first (`make test`, `make test-fast`).

1. and 2., side by side while the clusters start: the checks (ruff (lint, format), mypy, CRD drift,
   the docs site built strictly), the unit tests (tests/unit, the product; tests/harness, the test
   harness, but for the tests of the local cluster itself in tests/harness/cluster, which run with
   the cluster tiers) and the MLflow contract tests against the oldest MLflow release Slipway
   supports (its own server, no cluster; tests/tools/mlflow_contract.py) — a failed check or unit
   test stops the run there;
3. the cluster tiers, on two local clusters started in the background while 1 and 2 run and stopped
   at the end (the first is the one of `make cluster-up` if one runs): every test that shares the
   cluster with others, on several pytest-xdist workers on the first (each test in its own
   namespace; work-stealing, since one file of rollout tests alone takes minutes), and meanwhile
   the tests marked ``serial``, one at a time, on the second (they stop cluster components or
   install the operator cluster-wide; `--serial-after` runs them after the others on the first);
4. the real-node phase, on a third lane beside the other two from their start (after everything
   with `--serial-after`): a cluster of its own whose node is a kubelet on containerd, running the
   images `make image` built (tests/realnode).

Each pytest run writes a JUnit report under .cache/test-reports/; the summary at the end gives,
per tier, the number of tests, their total seconds and the wall time, then the slowest tests.

    python tests/suite.py            # everything (make test)
    python tests/suite.py --fast     # checks, unit, chart, plugin and health tests (make test-fast)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / ".cache" / "test-reports"
# The tests of the local cluster itself (its control plane, node agents, kubelet API, gateway) need
# one: they run in the cluster phases, the rest of tests/harness with the unit tests.
HARNESS_CLUSTER = "tests/harness/cluster"
CLUSTER_PATHS = ["tests/integration", HARNESS_CLUSTER, "tests/security", "tests/faults", "e2e/tests"]
# The unit phase: the product's pure logic (tests/unit/<package>/, laid out like operator/slipway),
# and the tests of the test harness itself (the fault proxies, the load driver, the node agent's logs
# and IPs, the local cluster's settings), no cluster.
UNIT_PATHS = ["tests/unit", "tests/harness", f"--ignore={HARNESS_CLUSTER}"]
# The real-node phase (tests/realnode/conftest.py): kubelet, containerd and the images of dist/.
REALNODE_PATHS = ["tests/realnode"]
FAST_PATHS = ["tests/integration/test_chart.py", "tests/integration/test_kubectl_plugin.py",
              "tests/integration/test_health.py", "tests/integration/test_argocd_actions.py"]  # fmt: skip
# The cluster tests that share the cluster run on this many workers: most of a cluster test's time
# is waiting on the cluster. With 3 workers and the serial lane beside them the 2 cores were 76% busy,
# with 4 80% (fresh-clone runs, docs/measurements.md). 5 workers with the real node's phase beside from
# the start overloaded them: two shared tests timed out waiting for a first pass in a fresh-clone run.
WORKERS = int(os.environ.get("SLIPWAY_TEST_WORKERS", "4"))
# Each cluster test's seconds in a recent run: the shared phase starts the longest modules first
# and hands out the rest, a module at a time, as workers free up (xdist's `loadscope`), so no long
# module starts last and a module's fixtures are made once. The modules whose tests take the
# node's GPUs go to one worker together (tests/conftest.py, `scope`): they take turns anyway. `--save-durations`
# rewrites it from the run's reports; a test not in it counts as DEFAULT_SECONDS.
DURATIONS = ROOT / "tests" / "durations.json"


@dataclass
class Result:
    nodeid: str
    seconds: float
    outcome: str  # passed, failed, error, skipped


@dataclass
class Phase:
    name: str
    wall: float = 0.0
    code: int = 0
    results: list[Result] = field(default_factory=list)
    cpu_busy: float | None = None  # the machine's CPUs busy over the phase's wall time, 0 to 1


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat; (0, 0) where there is none."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_since(before: tuple[int, int]) -> float | None:
    after = cpu_times()
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else None


def run(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> int:
    """Run a command in the checkout; with ``log``, its output goes there (a phase running beside
    another) and is printed whole once it ends."""
    print(f"\n$ {' '.join(cmd)}" + (f"  > {log.relative_to(ROOT)}" if log else ""), flush=True)
    if log is None:
        return subprocess.call(cmd, cwd=ROOT, env=env)
    with log.open("w") as out:
        code = subprocess.call(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    print(f"\n$ {' '.join(cmd)}\n{log.read_text()}", flush=True)
    return code


def junit_results(path: Path) -> list[Result]:
    """Every test case of a JUnit report, with its time (setup, call and teardown) and outcome."""
    if not path.exists():
        return []
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        module = (case.get("classname") or "").replace(".", "/")
        file = case.get("file") or module + ".py"
        results.append(Result(f"{file}::{case.get('name')}", float(case.get("time") or 0), outcome))
    return results


def save_durations(results: list[Result]) -> None:
    """Merge the measured seconds of passed tests into DURATIONS (kept sorted, whole seconds)."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    known.update({r.nodeid: round(r.seconds) for r in results if r.outcome == "passed"})
    DURATIONS.write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n")
    print(f"{len(known)} durations in {DURATIONS.relative_to(ROOT)}", flush=True)


def pytest_phase(name: str, args: list[str], env: dict[str, str] | None = None, beside: bool = False) -> Phase:
    """A pytest run and its JUnit report; ``beside``: it runs while another phase does, so its output
    is kept in a log and printed when it ends."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    report = REPORTS / f"{name.replace(' ', '-')}.xml"
    report.unlink(missing_ok=True)
    phase = Phase(name)
    started, cpu = time.monotonic(), cpu_times()
    cmd = [sys.executable, "-m", "pytest", "-q", "--durations=10", f"--junitxml={report}", *args]
    phase.code = run(cmd, env, log=report.with_suffix(".log") if beside else None)
    phase.wall = time.monotonic() - started
    phase.cpu_busy = busy_since(cpu)
    phase.results = junit_results(report)
    if phase.code == 5 and not phase.results:  # nothing selected in this phase: not a failure
        phase.code = 0
    return phase


def checks() -> Phase:
    """The Makefile's own checks (ruff, mypy, CRD drift, `make docs`): one list of what is checked.
    They run beside the unit tests: their output is kept in a log and printed when they end."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    phase = Phase("checks")
    started, cpu = time.monotonic(), cpu_times()
    phase.code = run(["make", "--no-print-directory", "verify"], log=REPORTS / "checks.log")
    phase.wall = time.monotonic() - started
    phase.cpu_busy = busy_since(cpu)
    return phase


def oldest_mlflow(pytest_args: list[str]) -> Phase:
    """The MLflow contract tests against the oldest release (the shared phase runs the newest)."""
    sys.path.insert(0, str(ROOT / "tests" / "tools"))
    from mlflow_contract import PATHS, release_env

    with release_env("oldest") as contract_env:
        return pytest_phase("mlflow oldest", [*PATHS, *pytest_args], contract_env, beside=True)


def without_cluster(fast: bool, pytest_args: list[str]) -> tuple[Phase, Phase, Phase | None]:
    """(checks, unit, oldest MLflow's contract tests but with ``fast``), all at once, while the
    clusters start. Each is mostly one process, and the unit tests alone kept the 2 cores 32% busy
    (they wait on local servers and clocks): side by side they take about the unit tests' time
    instead of the three one after the other."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="no-cluster") as pool:
        checked = pool.submit(checks)
        contract = None if fast else pool.submit(oldest_mlflow, pytest_args)
        unit = pytest_phase("unit", [*UNIT_PATHS, *pytest_args])
        return checked.result(), unit, contract.result() if contract else None


@contextlib.contextmanager
def local_cluster(reuse: bool = True) -> Iterator[Callable[[], Path]]:
    """A local cluster with its gateway: with ``reuse``, the one of `make cluster-up` if it is healthy;
    else one started here (in a temporary directory, in a thread while checks and unit tests run) and
    stopped afterwards. Yields a function that waits for it and returns its directory."""
    from localkube.cluster import ClusterConfig, down, up
    from localkube.gateway import ensure_gateway
    from localkube.state import DEFAULT_DIR, ClusterInfo

    running = ClusterInfo.load(DEFAULT_DIR) if reuse else None
    if running is not None and running.audit_log is not None and running.unhealthy_reason() is None:
        print(f"\nreusing the local cluster in {DEFAULT_DIR}", flush=True)
        ensure_gateway(DEFAULT_DIR)
        yield lambda: DEFAULT_DIR
        return
    directory = Path(tempfile.mkdtemp(prefix="slipway-tests-"))
    started = time.monotonic()

    def start() -> Path:
        up(ClusterConfig(directory=directory, gateway_api=True))
        print(f"\nlocal cluster started in {directory} in {time.monotonic() - started:.0f}s", flush=True)
        return directory

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster") as pool:
        ready = pool.submit(start)
        try:
            yield ready.result
        finally:
            # A start still under way (the checks or unit tests failed, or Ctrl-C) is waited for, then
            # stopped: its processes run in sessions of their own and would outlive this one.
            while not ready.done():
                try:
                    concurrent.futures.wait([ready])
                except KeyboardInterrupt:
                    print("\nstopping the local cluster as soon as it has started", flush=True)
            down(directory)
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _no_cluster() -> Iterator[Callable[[], Path]]:
    def none() -> Path:
        raise RuntimeError("no second cluster was started")

    yield none


def tier(nodeid: str) -> str:
    for prefix, name in (("tests/unit", "unit"), ("tests/harness", "harness"), ("tests/integration", "integration"),
                         ("tests/security", "security"), ("tests/faults", "faults"), ("e2e/tests", "e2e")):  # fmt: skip
        if nodeid.startswith(prefix):
            return name
    return "other"


def summary(phases: list[Phase], total_wall: float, slowest: int = 20) -> str:
    lines = ["", "=" * 30 + " test time " + "=" * 30]
    lines.append(f"{'phase':<18}{'tests':>7}{'test seconds':>14}{'wall seconds':>14}{'CPU busy':>10}")
    for phase in phases:
        seconds = sum(r.seconds for r in phase.results)
        busy = f"{phase.cpu_busy:>9.0%}" if phase.cpu_busy is not None else ""
        lines.append(f"{phase.name:<18}{len(phase.results):>7}{seconds:>14.0f}{phase.wall:>14.0f}{busy:>10}")
    lines.append(f"{'all':<18}{sum(len(p.results) for p in phases):>7}{'':>14}{total_wall:>14.0f}")
    by_tier: dict[str, list[Result]] = defaultdict(list)
    for phase in phases:
        for r in phase.results:
            by_tier[tier(r.nodeid)].append(r)
    lines.append("")
    lines.append(f"{'tier':<18}{'tests':>7}{'test seconds':>14}")
    for name in ("unit", "harness", "integration", "security", "faults", "e2e", "other"):
        if by_tier.get(name):
            lines.append(f"{name:<18}{len(by_tier[name]):>7}{sum(r.seconds for r in by_tier[name]):>14.0f}")
    everything = sorted((r for p in phases for r in p.results), key=lambda r: -r.seconds)
    lines.append("")
    lines.append(f"the {slowest} slowest tests:")
    lines += [f"{r.seconds:8.1f}s  {r.outcome:<7} {r.nodeid}" for r in everything[:slowest]]
    counts: defaultdict[str, int] = defaultdict(int)
    for r in everything:
        counts[r.outcome] += 1
    failed = counts["failed"] + counts["error"]
    lines.append("")
    lines.append(f"tests: {counts['passed']} passed, {failed} failed, {counts['skipped']} skipped")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="checks, unit, chart, plugin and health tests")
    parser.add_argument("--workers", type=int, default=WORKERS, help="xdist workers for the shared-cluster tests")
    parser.add_argument("--serial-after", dest="serial_beside", action="store_false",
                        help="run the serial tests after the shared ones, on the same cluster, and the real node's "
                             "after them, instead of beside the shared ones on clusters of their own")  # fmt: skip
    parser.add_argument(
        "--save-durations",
        action="store_true",
        help=f"after the run, write the cluster tests' seconds to {DURATIONS.relative_to(ROOT)}",
    )
    parser.add_argument("pytest_args", nargs="*", help="more arguments for every pytest run (e.g. -x, -k EXPR)")
    a = parser.parse_args()

    started = time.monotonic()
    phases: list[Phase] = []

    def finish(code: int) -> int:
        print(summary(phases, time.monotonic() - started), flush=True)
        return code

    # The serial tests stop cluster components or install the operator cluster-wide: they get a
    # cluster of their own, started beside the shared one, and run while the shared phase does.
    beside = not a.fast and a.serial_beside
    realnode_args = ["-p", "no:xdist", "-m", "realnode", *REALNODE_PATHS, *a.pytest_args]
    with local_cluster() as cluster, local_cluster(reuse=False) if beside else _no_cluster() as serial_cluster:
        checked, unit, contract = without_cluster(a.fast, a.pytest_args)
        phases += [checked, unit, *([contract] if contract else [])]
        if checked.code:
            print(f"checks failed after {checked.wall:.0f}s: fix them first", flush=True)
            return finish(checked.code)
        if unit.code:
            return finish(unit.code)

        waiting = time.monotonic()
        directory = cluster()
        phases.append(Phase("cluster wait", wall=time.monotonic() - waiting))
        env = {**os.environ, "LOCALKUBE_DIR": str(directory), "LOCALKUBE_REQUIRE_RUNNING": "1"}
        if a.fast:
            phases.append(pytest_phase("fast cluster", [*FAST_PATHS, *a.pytest_args], env))
        else:
            serial_args = ["-m", "serial", *CLUSTER_PATHS, *a.pytest_args]

            def second_lane() -> list[Phase]:
                """The serial tests on the second cluster, then the real node's, beside the shared phase
                (the real node's beside both from the start overloaded the 2 cores: two shared tests
                timed out in a fresh-clone run)."""
                serial_env = {**env, "LOCALKUBE_DIR": str(serial_cluster())}
                serial = pytest_phase("cluster serial", serial_args, serial_env, beside=True)
                return [serial, pytest_phase("real node", realnode_args, beside=True)]

            with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="serial") as lane:
                second = lane.submit(second_lane) if beside else None
                # --no-loadscope-reorder: xdist would otherwise hand out the scopes with the most tests
                # first, not the longest first as tests/conftest.py orders them.
                parallel = (
                    ["-n", str(a.workers), "--dist", "loadscope", "--no-loadscope-reorder"] if a.workers > 1 else []
                )
                longest_first = {**env, "SLIPWAY_LONGEST_FIRST": str(DURATIONS)}
                phases.append(pytest_phase("cluster shared", [*parallel, "-m", "not serial", *CLUSTER_PATHS,
                                                              *a.pytest_args], longest_first))  # fmt: skip
                phases.extend(second.result() if second else [pytest_phase("cluster serial", serial_args, env)])
            if a.save_durations:
                save_durations([r for p in phases if p.name in ("cluster shared", "cluster serial") for r in p.results])
    if not a.fast and not beside:  # once the shared cluster is down: a cluster of its own on a real node
        phases.append(pytest_phase("real node", realnode_args))
    return finish(max(p.code for p in phases))


if __name__ == "__main__":
    sys.exit(main())
