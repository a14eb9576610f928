"""The operator's settings are declared once (slipway.settings) and read once: OperatorConfig's
defaults and `python -m slipway`'s flags come from the table, no other module of the operator
reads a setting's variable, and docs/reference/settings.md is what the table generates."""

from __future__ import annotations

import argparse
import ast
from dataclasses import fields
from pathlib import Path

import pytest

from slipway import settings
from slipway.__main__ import build_parser
from slipway.config import CONFIG_FIELDS, OperatorConfig
from slipway.reference import pages

ROOT = Path(__file__).resolve().parents[3]
# The flags of earlier versions, each still there (scripts and manifests name them).
FLAGS = {"--standalone", "--leader-election-namespace", "--lease-duration", "--lease-renew-deadline",
         "--lease-renew-interval", "--lease-retry-period", "--stuck-pass-seconds", "--mlflow-url",
         "--mlflow-public-url", "--prices-file", "--prometheus-url", "--require-model-allowlist", "--allowed-gateways",
         "--allowed-prometheus-urls", "--metrics-port", "--liveness", "--verbose", "-v", "--namespace", "-n",
         "--all-namespaces", "-A", "-h", "--help", "--traefik-selector", "--max-digest-files",
         "--mlflow-proof-secret", "--adopt-mlflow-names"}  # fmt: skip
# Flags added since, each a setting of its own.
FLAGS |= {f"--{service}-{option}" for service in ("mlflow", "prometheus")
          for option in ("ca-bundle", "client-cert", "client-key", "insecure-tls")}  # fmt: skip
# What each setting's variable reads as, a text that is not the default.
SAMPLES = {float: ("7.5", 7.5), int: ("9", 9), settings.parse_bool: ("yes", True),
           settings.parse_list: (" a/b ,, c/d", ("a/b", "c/d")),
           settings.parse_url_list: ("http://p:9090", ("http://p:9090",)), str: ("xyz", "xyz"),
           settings.parse_selector: (' job = "t" ', 'job="t"')}  # fmt: skip


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in {e for s in settings.SETTINGS for e in s.env}:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_the_flags_are_those_of_earlier_versions():
    parser = build_parser()
    assert {o for action in parser._actions for o in action.option_strings} == FLAGS


def test_every_setting_reaches_the_config_and_its_flag_from_its_variable(clean: pytest.MonkeyPatch):
    for s in settings.SETTINGS:
        if not s.env or s.name == "workers":
            continue
        text, value = SAMPLES[s.parse]
        clean.setenv(s.env[0], text)
        if s.name in CONFIG_FIELDS:
            assert getattr(OperatorConfig(), s.name) == value, s.name
        if s.flag:
            assert getattr(build_parser().parse_args([]), s.dest) == value, s.flag
        clean.delenv(s.env[0])


def test_defaults_and_empty_variables(clean: pytest.MonkeyPatch):
    config, args = OperatorConfig(), build_parser().parse_args([])
    assert (config.metrics_port, config.workers, config.lease_duration_seconds) == (8080, 12, 15.0)
    assert config.mlflow_url is None
    assert (args.lease_duration, args.metrics_port, args.allowed_gateways, args.liveness) == (
        15.0, 8080, (), "http://0.0.0.0:8081/healthz")  # fmt: skip
    assert config.leader_election_namespace == "slipway-system"
    clean.setenv("POD_NAMESPACE", "ops")
    clean.setenv("SLIPWAY_LEADER_ELECTION_NAMESPACE", "")  # empty: unset, the next variable is read
    assert OperatorConfig().leader_election_namespace == "ops"
    assert build_parser().parse_args([]).leader_election_namespace == "ops"
    # An empty number is unset; an empty name is a value (no PriorityClass, no liveness endpoint).
    for variable in ("SLIPWAY_METRICS_PORT", "SLIPWAY_TRAINING_PRIORITY_CLASS", "SLIPWAY_LIVENESS"):
        clean.setenv(variable, "")
    config, args = OperatorConfig(), build_parser().parse_args([])
    assert (config.metrics_port, args.metrics_port) == (8080, 8080)
    assert (config.training_priority_class, args.liveness) == ("", "")
    clean.setenv("SLIPWAY_WORKERS", "1")
    assert OperatorConfig().workers == 3  # at least 3: one slot for canaries, a third for first passes


def test_a_flag_wins_and_a_bad_variable_is_refused_naming_the_flag(clean: pytest.MonkeyPatch, capsys):
    clean.setenv("SLIPWAY_LEASE_DURATION_SECONDS", "20")
    assert build_parser().parse_args(["--lease-duration", "30"]).lease_duration == 30.0
    clean.setenv("SLIPWAY_ALLOWED_PROMETHEUS_URLS", "ftp://nope")
    with pytest.raises(SystemExit):
        build_parser().parse_args([])
    assert "--allowed-prometheus-urls: 'ftp://nope' is not an http(s) URL" in capsys.readouterr().err
    with pytest.raises(ValueError, match="SLIPWAY_ALLOWED_PROMETHEUS_URLS: 'ftp://nope'"):
        OperatorConfig()


def test_config_fields_take_their_defaults_from_the_table():
    constants = {"http_timeout_seconds", "namespaces"}  # not settings: a constant, and the flag -n
    for f in fields(OperatorConfig):
        if f.name not in constants:
            assert f.name in settings.BY_NAME, f"declare {f.name} in slipway/settings.py"
            assert f.default_factory.__qualname__.startswith("_setting"), f.name  # type: ignore[union-attr]


def test_no_other_module_reads_a_settings_variable():
    variables = {e for s in settings.SETTINGS for e in s.env}
    package = ROOT / "operator" / "slipway"
    readers = []
    for path in package.rglob("*.py"):
        if path.name == "settings.py" or path.relative_to(package).parts[0] == "workloads":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in variables:
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert not readers


def test_the_committed_settings_page_is_what_the_table_generates(tmp_path):
    committed = ROOT / "docs" / "reference" / "settings.md"
    assert committed.read_text() == pages()["settings.md"](), "run `make reference`"
    page = committed.read_text()
    shown = [s for s in settings.SETTINGS if s.help != argparse.SUPPRESS]
    assert all(f"| {s.name} |" in page for s in shown) and "lease_renew_interval" not in page
    assert "`SLIPWAY_MLFLOW_URL` *empty is a value*" in page and "| `--metrics-port` | `SLIPWAY_METRICS_PORT` |" in page


def test_a_setting_is_described_once_in_the_table():
    """Its help is the flag's --help (with its variables and default, from the table) and its row of
    the settings page; OperatorConfig's fields carry no description of their own."""
    lines = (ROOT / "operator" / "slipway" / "config.py").read_text().splitlines()
    commented = [line for at, line in enumerate(lines) if "_setting(" in line and lines[at - 1].strip()[:1] == "#"]
    assert commented == [], "describe a setting in its help in operator/slipway/settings.py"
    assert all(settings.BY_NAME[name].help for name in CONFIG_FIELDS if name in settings.BY_NAME)
    helps = {a.dest: a.help for a in build_parser()._actions}
    duration = "a Lease not renewed for this long may be taken over ($SLIPWAY_LEASE_DURATION_SECONDS; default 15.0)"
    assert helps["lease_duration"] == duration
    namespace = "($SLIPWAY_LEADER_ELECTION_NAMESPACE else $POD_NAMESPACE; default slipway-system)"
    assert helps["leader_election_namespace"] == f"namespace of the Lease {namespace}"
    assert helps["standalone"] == settings.BY_NAME["standalone"].help  # no variable, a switch: nothing to add
