"""Slipway's benchmarks: run by hand (``make bench``, ``python -m bench``), never by the tests or CI.

``python -m bench all`` runs the four scenarios (bench/README.md) into ``bench/out/run-<time>/``,
one raw JSON file per scenario beside ``run.json`` (the machine, the versions, the date), with the
run's page; ``python -m bench publish`` keeps a run in ``bench/runs/`` (gzip'd), and ``python -m
bench report`` renders ``bench/RESULTS.md`` and ``bench/plots/*.png`` from the kept runs alone.
"""
