"""``python -m bench {all,rollback,at-rest,scale,llm-hand,report,publish}``: see bench/README.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import rundir

SCENARIOS = ("rollback", "at-rest", "scale", "llm-hand")


def _module(name: str):  # the scenario modules import the cluster tooling: only when run
    if name == "rollback":
        from bench import scenario_a as module
    elif name == "at-rest":
        from bench import scenario_b as module
    elif name == "llm-hand":
        from bench import scenario_e as module
    else:
        from bench import scenario_c as module
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    every = sub.add_parser("all", help="every scenario, one after the other, then the report")
    every.add_argument("--only", action="append", choices=SCENARIOS, help="run only these scenarios (repeatable)")
    every.add_argument("--out", type=Path, help="the run's folder (default: bench/out/run-<time>)")
    for name in SCENARIOS:
        _module(name).add_arguments(every)
    for name in SCENARIOS:
        one = sub.add_parser(name, help=f"scenario {name} alone, into the last run's folder or --out")
        one.add_argument("--out", type=Path, help="the run's folder (default: a new bench/out/run-<time>)")
        _module(name).add_arguments(one)
    report = sub.add_parser(
        "report", help="render bench/RESULTS.md and bench/plots/ from the kept runs (bench/runs/), or RUN's page in RUN"
    )
    report.add_argument("run", nargs="?", type=Path, help="an unpublished run's folder: its RESULTS.md and plots/")
    publish = sub.add_parser(
        "publish", help="copy a run's raw JSON to bench/runs/NAME/ (kept in Git) and render from it"
    )
    publish.add_argument("run", nargs="?", type=Path, help="the run's folder (default: the last run)")
    publish.add_argument("--name", help="the folder under bench/runs/ (default: the run's name)")
    args = parser.parse_args(argv)

    from bench import page

    if args.command == "report" and args.run:
        page.render(args.run, args.run / "RESULTS.md", args.run / "plots")
        return 0
    if args.command == "report":
        page.render_kept()
        return 0
    if args.command == "publish":
        run = args.run or rundir.last_run()
        rundir.publish(run, args.name or run.resolve().name)
        page.render_kept()
        return 0
    run = rundir.start(args.out.resolve() if args.out else None)  # absolute: kwok and the cluster run elsewhere
    names = (args.only or list(SCENARIOS)) if args.command == "all" else [args.command]
    failed = []
    for name in names:
        try:
            _module(name).run(run, args)
        except (Exception, KeyboardInterrupt) as e:  # the other scenarios still run; the report says what failed
            rundir.record_failure(run, name, e)
            failed.append(name)
            if isinstance(e, KeyboardInterrupt):
                break
    # The run's page goes into its own folder: bench/RESULTS.md is rendered from the kept runs alone,
    # so it changes only once a run is published (`python -m bench publish`).
    page.render(run, run / "RESULTS.md", run / "plots")
    print(f"to keep it in Git and render bench/RESULTS.md with it: python -m bench publish {run} --name NAME")
    if failed:
        print(f"failed: {', '.join(failed)} (see {run}/failures.json)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
