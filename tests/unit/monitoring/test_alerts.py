"""Every alert of the monitoring kit (manifests/monitoring/prometheusrule.yaml, also the chart's) links
to its runbook: a ``runbook_url`` to a page of docs/ as the project's repository serves it (the chart's
``home``), at a heading anchor that page has, the anchors computed as the docs build computes them
(MyST's GitHub-style slugs, down to the depth of ``myst_heading_anchors`` in docs/conf.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from myst_parser.slugs import github_slugify, unique_slug

from slipway_testing import ROOT

DOCS = ROOT / "docs"
RULES = yaml.safe_load((ROOT / "manifests" / "monitoring" / "prometheusrule.yaml").read_text())
ALERTS = [r for g in RULES["spec"]["groups"] for r in g["rules"] if "alert" in r]
HOME = yaml.safe_load((ROOT / "charts" / "slipway" / "Chart.yaml").read_text())["home"]
DOCS_URL = f"{HOME}/blob/main/docs/"
FENCE = re.compile(r"^(```|~~~|:::)")


def anchor_depth() -> int:
    """``myst_heading_anchors`` of docs/conf.py: headings down to this level get anchors."""
    tree = ast.parse((DOCS / "conf.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["myst_heading_anchors"]:
            return int(ast.literal_eval(node.value))
    raise AssertionError("docs/conf.py sets no myst_heading_anchors")


def anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page, outside code fences, as MyST makes them (its default
    slug function; a repeated slug gets -1, -2, ...)."""
    depth, fenced = anchor_depth(), False
    found: set[str] = set()
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = re.match(r"^(#{1,6}) +(.+?)\s*#*\s*$", line)
        if fenced or heading is None or len(heading.group(1)) > depth:
            continue
        found.add(unique_slug(github_slugify(heading.group(2)), found))
    return found


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("# Runbooks\n## SlipwayRollback\n", {"runbooks", "slipwayrollback"}),
        ("## When the clocks differ\n### A's `x`\n", {"when-the-clocks-differ", "as-x"}),
        ("## Same\n## Same\n", {"same", "same-1"}),
        ("```sh\n# not a heading\n```\n##### Too deep\n", set()),
    ],
)
def test_anchors_are_computed_as_the_docs_build_computes_them(tmp_path, markdown, expected):
    page = tmp_path / "page.md"
    page.write_text(markdown)
    assert anchors(page) == expected


def test_the_kit_has_alerts():
    assert len(ALERTS) >= 8 and len({a["alert"] for a in ALERTS}) == len(ALERTS)


@pytest.mark.parametrize("alert", ALERTS, ids=[a["alert"] for a in ALERTS])
def test_each_alert_links_to_a_runbook_section_that_exists(alert):
    url = alert["annotations"].get("runbook_url")
    assert url, f"{alert['alert']} has no runbook_url annotation"
    assert url.startswith(DOCS_URL), f"{url} is not a page of the docs at {DOCS_URL}"
    path, _, anchor = url.removeprefix(DOCS_URL).partition("#")
    page = DOCS / path
    assert page.suffix == ".md" and page.is_file(), f"{alert['alert']}: docs/{path} does not exist"
    assert anchor, f"{alert['alert']}: {url} names no section"
    assert anchor in anchors(page), f"{alert['alert']}: docs/{path} has no heading #{anchor}"
    # Its own section, not a shared one: the heading is the alert's name.
    assert anchor == github_slugify(alert["alert"])
