"""The monitoring kit's rules and dashboard, checked by the real promtool: the rules load, every
dashboard query is valid PromQL, and each alert fires on the series that should fire it (and not
on the ones that should not), by ``promtool test rules``. The kit against a live Prometheus
during a real rollback is in e2e/tests/test_lifecycle.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from localkube.cluster import CONTROLPLANE
from slipway_e2e.monitoring import KIT, PROMTOOL, dashboard_queries, promtool_check, rule_groups


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_alert_rules_load_and_every_dashboard_query_is_valid_promql(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    assert "SUCCESS: 8 rules found" in promtool_check(rules)
    queries = dashboard_queries()
    assert len(queries) >= 15
    recording = [{"record": f"slipway:dashboard_panel_{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]
    panels = tmp_path / "panels.yml"
    panels.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recording}]}))
    promtool_check(panels)


def fires(at: str, alert: str, **labels: str) -> dict[str, object]:
    """A promtool expectation: ``alert`` firing at ``at`` with ``labels``, its severity and its
    annotations as Prometheus renders them ({{ $labels.x }} filled in)."""
    rule = next(r for g in rule_groups() for r in g["rules"] if r.get("alert") == alert)

    def render(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)

    expected = {"exp_labels": {**rule["labels"], **labels},
                "exp_annotations": {k: render(v) for k, v in rule["annotations"].items()}}  # fmt: skip
    return {"eval_time": at, "alertname": alert, "exp_alerts": [expected]}


def test_each_alert_fires_on_what_it_names_and_only_then(tmp_path):
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    cases = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # digits rolled back at minute 5; other is promoted throughout.
                    {"series": 'slipway_inferencedeployment_phase{namespace="team-a",name="digits",phase="RolledBack"}',
                     "values": "0x4 1x30"},
                    {"series": 'slipway_inferencedeployment_last_rollback_timestamp_seconds{namespace="team-a",'
                               'name="digits",reason="AnalysisFailed",version="7"}', "values": "_x4 300x30"},
                    # other was rolled back yesterday, and has been promoted since.
                    {"series": 'slipway_inferencedeployment_last_rollback_timestamp_seconds{namespace="team-a",'
                               'name="other",reason="AnalysisFailed",version="2"}', "values": "-86400x35"},
                    {"series": 'slipway_inferencedeployment_phase{namespace="team-a",name="other",phase="RolledBack"}',
                     "values": "0x35"},
                    # a TrainingRun stalled from minute 0, a ModelArtifact only for 5 minutes.
                    {"series": 'slipway_object_stalled{kind="TrainingRun",namespace="team-a",name="run"}',
                     "values": "1x30"},
                    {"series": 'slipway_object_stalled{kind="ModelArtifact",namespace="team-a",name="a"}',
                     "values": "1x4 0x25"},
                    {"series": 'slipway_reconcile_total{kind="InferenceDeployment",result="error"}',
                     "values": "0+3x30"},
                    {"series": 'slipway_reconcile_total{kind="TrainingRun",result="error"}', "values": "5x30"},
                    # TrainingRuns: mostly retries from minute 0; ModelArtifacts: a few among many successes.
                    {"series": 'slipway_reconcile_total{kind="TrainingRun",result="retry"}', "values": "0+4x30"},
                    {"series": 'slipway_reconcile_total{kind="TrainingRun",result="ok"}', "values": "0+1x30"},
                    {"series": 'slipway_reconcile_total{kind="ModelArtifact",result="retry"}', "values": "0+1x30"},
                    {"series": 'slipway_reconcile_total{kind="ModelArtifact",result="ok"}', "values": "0+5x30"},
                    {"series": 'slipway_external_requests_total{service="mlflow",outcome="error"}',
                     "values": "0+10x30"},
                    {"series": 'slipway_external_requests_total{service="mlflow",outcome="ok"}',
                     "values": "0+5x5 30x25"},
                    {"series": 'slipway_object_ready{kind="InferenceDeployment",namespace="team-a",name="llm",'
                               'reason="AnalysisInconclusive"}', "values": "0x30"},
                    {"series": 'slipway_inferencedeployment_phase{namespace="team-a",name="llm",phase="Paused"}',
                     "values": "1x30"},
                    # two replicas; the leader refuses a delivery as stale at minute 10 (its series exported from 0)
                    {"series": 'slipway_mlflow_webhook_deliveries_total{pod="slipway-operator-a",outcome="stale"}',
                     "values": "0x9 1x20"},
                    {"series": 'slipway_mlflow_webhook_deliveries_total{pod="slipway-operator-b",outcome="stale"}',
                     "values": "0x30"},
                    {"series": 'slipway_leader{pod="slipway-operator-a"}', "values": "1x5 0x25"},
                    {"series": 'slipway_leader{pod="slipway-operator-b"}', "values": "0x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "SlipwayRollback", "exp_alerts": []},
                    fires("10m", "SlipwayRollback", namespace="team-a", name="digits", reason="AnalysisFailed",
                          version="7"),
                    fires("12m", "SlipwayObjectStalled", kind="TrainingRun", namespace="team-a", name="run"),
                    fires("12m", "SlipwayReconcileErrors", kind="InferenceDeployment"),
                    {"eval_time": "10m", "alertname": "SlipwayReconcileRetries", "exp_alerts": []},
                    fires("20m", "SlipwayReconcileRetries", kind="TrainingRun"),
                    {"eval_time": "4m", "alertname": "SlipwayMlflowUnreachable", "exp_alerts": []},
                    fires("20m", "SlipwayMlflowUnreachable"),
                    {"eval_time": "10m", "alertname": "SlipwayAnalysisInconclusive", "exp_alerts": []},
                    fires("20m", "SlipwayAnalysisInconclusive", namespace="team-a", name="llm"),
                    {"eval_time": "9m", "alertname": "SlipwayMlflowWebhookClockSkew", "exp_alerts": []},
                    fires("10m", "SlipwayMlflowWebhookClockSkew"),
                    fires("23m", "SlipwayMlflowWebhookClockSkew"),
                    {"eval_time": "26m", "alertname": "SlipwayMlflowWebhookClockSkew", "exp_alerts": []},
                    {"eval_time": "4m", "alertname": "SlipwayNoLeader", "exp_alerts": []},
                    fires("15m", "SlipwayNoLeader"),
                ],
            }
        ],
    }  # fmt: skip
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(cases, sort_keys=False))
    done = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_kit_renders_with_kustomize_and_the_dashboard_is_labelled_for_grafana():
    rendered = subprocess.run([str(CONTROLPLANE.parent / "kubectl"), "kustomize", str(KIT)], capture_output=True,
                              text=True, timeout=60, check=True).stdout  # fmt: skip
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(rendered)}
    assert set(objects) == {("ServiceMonitor", "slipway-operator"), ("PodMonitor", "slipway-serving"),
                            ("PrometheusRule", "slipway"), ("ConfigMap", "slipway-dashboard")}  # fmt: skip
    assert objects[("ConfigMap", "slipway-dashboard")]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert objects[("ServiceMonitor", "slipway-operator")]["spec"]["endpoints"][0]["honorLabels"] is True
    assert {o["metadata"]["namespace"] for o in objects.values()} == {"slipway-system"}
