"""kubectl slipway list, history and version: the lines of a list, the rows of a history from a status and
its Events, the operator's version from its Deployment, and -o json|yaml; then each command run end to end
over a stand-in kubectl that answers API paths from a table."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from slipway import __version__
from slipway.cli import history, listing, main, output, versions
from slipway.cli.client import ApiError, Session
from slipway.cli.refs import INFERENCE_DEPLOYMENT as IDEP
from slipway.cli.refs import MODEL_ARTIFACT as MA
from slipway.cli.refs import TRAINING_RUN as TR

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any], namespace: str = "team-a", age: float = 60):
    meta = {"name": name, "namespace": namespace, "creationTimestamp": at(age), "uid": f"uid-{name}"}
    return {"apiVersion": "slipway.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec, "status": status}


STEPS = {"steps": [{"weight": 25}, {"weight": 50}]}
RUN = obj("TrainingRun", "digits", {}, {"phase": "Running", "progress": {"step": 800, "totalSteps": 1000}}, age=5400)
ARTIFACT = obj(
    "ModelArtifact",
    "digits",
    {"model": {"name": "digits"}},
    {"phase": "Validated", "modelVersion": "3", "quantizedVersion": "4"},
    age=3000,
)
CANARY = obj(
    "InferenceDeployment",
    "digits",
    {"model": {"name": "digits", "alias": "candidate"}, "rollout": STEPS},
    {
        "phase": "Analyzing",
        "currentStep": 1,
        "stable": {"revision": "aaa", "modelName": "digits", "modelVersion": "2", "weight": 50},
        "canary": {"revision": "bbb", "modelName": "digits", "modelVersion": "4", "weight": 50},
        "canaryStartTime": at(300),
    },
    age=86400 * 3 + 3600 * 5,
)
PROMOTED = obj(
    "InferenceDeployment",
    "scorer",
    {"model": {"name": "scorer", "alias": "candidate"}},
    {
        "phase": "Promoted",
        "stable": {"revision": "ccc", "modelName": "scorer", "modelVersion": "7", "weight": 100},
        "canary": {"weight": 0},
    },
    namespace="team-b",
    age=30,
)


# -- list ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0s"),
        (45, "45s"),
        (119, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (600, "10m"),
        (5700, "95m"),
        (3 * 3600 + 600, "3h10m"),
        (8 * 3600, "8h"),
        (30 * 3600, "30h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (12 * 86400, "12d"),
        (800 * 86400, "2y70d"),
        (3000 * 86400, "8y"),
    ],
)
def test_age_as_kubectl_writes_it(seconds: int, text: str):
    assert listing.age(at(seconds), NOW) == text


def test_age_of_an_unreadable_or_future_time():
    assert listing.age(None, NOW) == "<unknown>"
    assert listing.age(at(-60), NOW) == "<invalid>"


@pytest.mark.parametrize(
    "kind, o, line",
    [
        (TR, RUN, listing.Line("team-a", "tr/digits", "Running", "step 800/1000", "-", "90m")),
        (MA, ARTIFACT, listing.Line("team-a", "ma/digits", "Validated", "-", "digits v3 (quantized v4)", "50m")),
        (IDEP, CANARY, listing.Line("team-a", "idep/digits", "Analyzing", "step 2/2 50%", "digits v2 -> v4", "3d5h")),
        (IDEP, PROMOTED, listing.Line("team-b", "idep/scorer", "Promoted", "-", "scorer v7", "30s")),
        # Promoting: the canary's weight, no step; a canary of another model names it.
        (
            IDEP,
            {
                **CANARY,
                "status": {
                    **CANARY["status"],
                    "phase": "Promoting",
                    "canary": {"revision": "x", "modelName": "other", "modelVersion": "1", "weight": 100},
                },
            },
            listing.Line("team-a", "idep/digits", "Promoting", "100%", "digits v2 -> other v1", "3d5h"),
        ),
        # A new object: no status yet.
        (IDEP, {**PROMOTED, "status": {}}, listing.Line("team-b", "idep/scorer", "-", "-", "-", "30s")),
    ],
)
def test_list_lines(kind, o, line):
    assert listing.line(kind, o, NOW) == line


def test_list_table_by_namespace_then_kind_then_name():
    rows = listing.lines([(IDEP, PROMOTED), (IDEP, CANARY), (MA, ARTIFACT), (TR, RUN)], NOW)
    assert [r.ref for r in rows] == ["tr/digits", "ma/digits", "idep/digits", "idep/scorer"]
    assert listing.table(rows, all_namespaces=True) == (
        "NAMESPACE   NAME          PHASE       PROGRESS        VERSION                    AGE\n"
        "team-a      tr/digits     Running     step 800/1000   -                          90m\n"
        "team-a      ma/digits     Validated   -               digits v3 (quantized v4)   50m\n"
        "team-a      idep/digits   Analyzing   step 2/2 50%    digits v2 -> v4            3d5h\n"
        "team-b      idep/scorer   Promoted    -               scorer v7                  30s\n"
    )
    assert listing.table(rows[:1], all_namespaces=False) == (
        "NAME        PHASE     PROGRESS        VERSION   AGE\ntr/digits   Running   step 800/1000   -         90m\n"
    )


# -- history ------------------------------------------------------------------------------------------


def event(reason: str, message: str, seconds_ago: float, type_: str = "Normal", **extra: Any) -> dict[str, Any]:
    return {
        "reason": reason,
        "message": message,
        "type": type_,
        "lastTimestamp": at(seconds_ago),
        "involvedObject": {"kind": "InferenceDeployment", "name": "digits", "uid": "uid-digits"},
        **extra,
    }


ROLLBACK = {
    "reason": "AnalysisFailed",
    "metric": "errorRate",
    "value": 0.31,
    "modelName": "digits",
    "modelVersion": "3",
    "revision": "r3",
    "time": at(3500),
}
ROLLED_BACK = obj(
    "InferenceDeployment",
    "digits",
    {"model": {"name": "digits", "alias": "candidate"}},
    {
        "phase": "RolledBack",
        "lastRollback": ROLLBACK,
        "stable": {
            "revision": "r2",
            "modelName": "digits",
            "modelVersion": "2",
            "replicas": 2,
            "readyReplicas": 2,
            "weight": 100,
        },
        "canary": {"weight": 0},
    },
)
EVENTS = [
    event("Promoted", "serving digits version 2 (revision r2) (2/2 replicas ready)", 7000),
    event("Progressing", "starting canary digits version 3 (revision r3): 0/1 pods ready", 3900),
    event("Analyzing", "canary digits version 3 (revision r3) at step 1/2", 3800, count=3),
    event(
        "RolledBack",
        "rolled back digits version 3 (revision r3): errorRate 0.31 > 0.05; stable keeps serving "
        "digits version 2 (revision r2)",
        3499,
        type_="Warning",
    ),
    event(
        "RolledBack",
        "digits version 3 (revision r3) was rolled back (AnalysisFailed); stable serves digits version 2 (revision r2)",
        3498,
        type_="Warning",
    ),
    event("AliasMoved", "MLflow alias production of digits now points at version 2", 3450),
    event(
        "RegistryRefused",
        "alias production of digits -> version 2: 403",
        3400,
        type_="Warning",
        eventTime=at(3400)[:-1] + ".123456Z",
    ),
]


def test_history_rows_from_events_and_status():
    rows = history.entries(ROLLED_BACK, EVENTS)
    assert [(r.event, r.version) for r in rows] == [
        ("Promoted", "digits v2"),
        ("Progressing", "digits v3"),
        ("Analyzing", "digits v3"),
        ("RolledBack", "digits v3"),
        ("RolledBack", "digits v3"),
        ("AliasMoved", "digits v2"),
        ("RegistryRefused", "-"),
    ]
    assert [r.time for r in rows] == [at(s) for s in (7000, 3900, 3800, 3499, 3498, 3450, 3400)]
    # The status record stands for the Events of the same rollback: its reason and metric on the first.
    assert rows[3].detail.startswith(
        "AnalysisFailed errorRate=0.31; revision r3: Warning: rolled back digits version 3"
    )
    assert rows[4].detail.startswith("Warning: digits version 3 (revision r3) was rolled back")
    assert rows[2].detail.endswith("at step 1/2 (x3)")


def test_history_from_status_alone_when_the_events_are_gone():
    retried = {**ROLLBACK, "retried": True, "tag": "slipway.dev/rollback=..."}
    status = {
        **ROLLED_BACK["status"],
        "phase": "Analyzing",
        "lastRollback": retried,
        "canaryStartTime": at(60),
        "canary": {"revision": "r3b", "modelName": "digits", "modelVersion": "3", "weight": 25},
    }
    rows = history.entries({**ROLLED_BACK, "status": status}, [])
    assert [(r.time, r.event, r.version) for r in rows] == [
        (at(3500), "RolledBack", "digits v3"),
        (at(60), "Progressing", "digits v3"),
    ]
    assert rows[0].detail == (
        "AnalysisFailed errorRate=0.31; revision r3; read back from the version's MLflow tag (the object was "
        "re-created); retried since"
    )
    text = history.render({**ROLLED_BACK, "status": status}, rows, events=0)
    assert "No Events (they last an hour by default): the rows above are what status keeps." in text


def test_a_status_record_far_from_the_event_of_the_same_reason_is_its_own_row():
    events = [event("RolledBack", "rolled back digits version 3 (revision r3): aborted", 3500 + 600)]
    rows = history.entries(ROLLED_BACK, events)
    assert [(r.event, r.version, r.time) for r in rows] == [
        ("RolledBack", "digits v3", at(4100)),
        ("RolledBack", "digits v3", at(3500)),
    ]


def test_history_text():
    previous = {"modelName": "digits", "modelVersion": "1"}
    o = {**ROLLED_BACK, "status": {**ROLLED_BACK["status"], "previousStable": previous}}
    text = history.render(o, history.entries(o, EVENTS[:2]), events=2)
    assert text == (
        "InferenceDeployment/digits  RolledBack\n"
        "  stable  digits v2  revision r2  2/2 ready  weight 100%\n"
        "  canary  none\n"
        "  before  digits v1 (restored if the promotion in flight fails)\n"
        "\n"
        "TIME                   EVENT         VERSION     DETAIL\n"
        f"{at(7000)}   Promoted      digits v2   serving digits version 2 (revision r2) (2/2 replicas ready)\n"
        f"{at(3900)}   Progressing   digits v3   starting canary digits version 3 (revision r3): 0/1 pods ready\n"
        f"{at(3500)}   RolledBack    digits v3   AnalysisFailed errorRate=0.31; revision r3\n"
    )


# -- version ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image, tag",
    [
        ("ghcr.io/slipway-dev/slipway-operator:0.1.0", "0.1.0"),
        ("registry.local:5000/slipway-operator:0.2.0", "0.2.0"),
        ("registry.local:5000/slipway-operator", None),
        ("ghcr.io/slipway-dev/slipway-operator@sha256:" + "a" * 64, None),
        ("ghcr.io/slipway-dev/slipway-operator:0.3.0@sha256:" + "a" * 64, "0.3.0"),
        ("slipway-operator", None),
    ],
)
def test_image_tags(image: str, tag: str | None):
    assert versions.image_tag(image) == tag


def operator_deployment(image: str, labels: dict[str, str] | None = None, namespace: str = "slipway-system"):
    return {
        "metadata": {"name": "slipway-operator", "namespace": namespace, "labels": labels or {}},
        "spec": {
            "replicas": 2,
            "template": {
                "spec": {"containers": [{"name": "sidecar", "image": "proxy:9"}, {"name": "operator", "image": image}]}
            },
        },
        "status": {"readyReplicas": 2},
    }


BY_DIGEST = "ghcr.io/slipway-dev/slipway-operator@sha256:" + "b" * 64


@pytest.mark.parametrize(
    "deployment, version",
    [
        (operator_deployment("ghcr.io/slipway-dev/slipway-operator:0.1.0"), "0.1.0"),  # manifests/: the tag
        (operator_deployment(BY_DIGEST, {versions.VERSION_LABEL: "0.2.0"}), "0.2.0"),  # a release's chart: the label
        (operator_deployment(BY_DIGEST), "unknown"),
    ],
)
def test_the_operators_version_from_its_deployment(deployment, version):
    assert versions.operator_version(deployment) == version


def test_operator_lines():
    found = operator_deployment("ghcr.io/slipway-dev/slipway-operator:0.1.0")
    assert versions.operator_lines([found]) == [
        "operator: 0.1.0 (slipway-system/slipway-operator, image ghcr.io/slipway-dev/slipway-operator:0.1.0, 2/2 ready)"
    ]
    assert versions.operator_lines([]) == [
        "operator: not found (no Deployment labelled app.kubernetes.io/name=slipway,"
        "app.kubernetes.io/component=operator in any namespace)"
    ]


# -- -o json|yaml -------------------------------------------------------------------------------------


def test_yaml_reads_back_as_the_json_it_stands_for():
    tricky = [
        "yes",
        "No",
        "on",
        "1.0",
        "2025-01-01",
        "",
        " x",
        "a: b",
        "#x",
        "- x",
        "null",
        "~",
        "1e3",
        "0x1F",
        "x\ny",
        "é",
        "[x]",
        "&a",
        "*a",
        "!x",
        "%x",
        "@x",
        "'x",
        '"x',
        "|",
        ">",
        "?x",
        "x #y",
        "x:",
        "1:20",
        "=",
        "<<",
        ".inf",
        "x ",
        "a b c",
        "app.kubernetes.io/name",
        "NaN",
        "-1",
        "0o7",
        "1_000",
        ".5",
    ]
    numbers = [0, -3, 2.5, 1e20, 1.5e-7, 100.0, True, False, None, float("inf")]
    value = {
        "strings": tricky,
        "numbers": numbers,
        "nested": [[1, [2]], {"a": [], "b": {}, "c": [{"x": {"y": [1]}}]}],
        "k: y": 1,
        "yes": 2,
        "2025": 3,
        "empty": {},
        "list": [],
    }
    assert yaml.safe_load(output.to_yaml(value)) == value
    assert json.loads(output.to_json(value).replace("Infinity", "1e999")) == value


def test_yaml_is_block_style_and_plain_where_it_can_be():
    assert output.to_yaml(
        {
            "metadata": {"name": "digits", "labels": {"app.kubernetes.io/name": "slipway"}},
            "spec": {"steps": [{"weight": 25}, {"weight": 50}]},
            "status": {"time": "2025-01-01T00:00:00Z", "ready": "True"},
        }
    ) == (
        "metadata:\n"
        "  name: digits\n"
        "  labels:\n"
        "    app.kubernetes.io/name: slipway\n"
        "spec:\n"
        "  steps:\n"
        "  - weight: 25\n"
        "  - weight: 50\n"
        "status:\n"
        '  time: "2025-01-01T00:00:00Z"\n'
        '  ready: "True"\n'
    )


def test_a_list_of_objects_as_kubectl_prints_it_without_managed_fields():
    managed = {**CANARY, "metadata": {**CANARY["metadata"], "managedFields": [{"manager": "kubectl"}]}}
    listed = output.as_list([managed])
    assert listed["apiVersion"] == "v1" and listed["kind"] == "List"
    assert "managedFields" not in listed["items"][0]["metadata"] and listed["items"][0]["status"] == CANARY["status"]


# -- the commands, over a stand-in kubectl --------------------------------------------------------------


class FakeKubectl:
    """Answers GETs of API paths from a table (an ApiError: raised), and records patches."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.asked = answers, []

    def get(self, path: str) -> dict[str, Any]:
        self.asked.append(path)
        answer = self.answers[path]
        if isinstance(answer, ApiError):
            raise answer
        return answer

    def run(self, *args: str, timeout: float = 30) -> str:
        raise AssertionError(f"unexpected kubectl {args}")


def items(*objects: dict[str, Any]) -> dict[str, Any]:
    return {
        "items": [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in objects],
        "metadata": {"resourceVersion": "9"},
    }


SLIPWAY = "/apis/slipway.dev/v1alpha1"
EVERYWHERE = {
    f"{SLIPWAY}/trainingruns": items(RUN),
    f"{SLIPWAY}/modelartifacts": items(ARTIFACT),
    f"{SLIPWAY}/inferencedeployments": items(CANARY, PROMOTED),
}


def run(argv: list[str], answers: dict[str, Any]) -> tuple[int, str, str, FakeKubectl]:
    kubectl = FakeKubectl(answers)
    out, err = io.StringIO(), io.StringIO()
    code = main.run(argv, out, err, lambda *flags: Session(kubectl, "team-a"))
    return code, out.getvalue(), err.getvalue(), kubectl


def test_list_in_every_namespace():
    code, out, err, _ = run(["list", "-A"], EVERYWHERE)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "PHASE", "PROGRESS", "VERSION", "AGE"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["team-a", "tr/digits", "Running"],
        ["team-a", "ma/digits", "Validated"],
        ["team-a", "idep/digits", "Analyzing"],
        ["team-b", "idep/scorer", "Promoted"],
    ]


def test_list_of_one_kind_in_the_namespace_as_yaml_and_json():
    answers = {f"{SLIPWAY}/namespaces/team-a/inferencedeployments": items(CANARY)}
    code, out, err, kubectl = run(["list", "idep", "-o", "yaml"], answers)
    assert code == 0, err
    assert kubectl.asked == [f"{SLIPWAY}/namespaces/team-a/inferencedeployments"]
    listed = yaml.safe_load(out)
    assert listed["kind"] == "List" and listed["items"] == [CANARY]  # each item with its apiVersion and kind
    code, out, err, _ = run(["list", "inferencedeployments", "-o", "json"], answers)
    assert json.loads(out) == listed


def test_an_empty_list_says_where_it_looked():
    empty = {f"{SLIPWAY}/namespaces/team-a/{k.plural}": items() for k in (TR, MA, IDEP)}
    assert run(["list"], empty)[1] == (
        "No TrainingRuns, ModelArtifacts or InferenceDeployments found in namespace team-a.\n"
    )
    assert run(["list", "idep", "-o", "json"], empty)[1] == output.to_json(output.as_list([]))


def test_get_as_json_is_the_trees_objects_roots_first():
    answers = {
        f"{SLIPWAY}/namespaces/team-a/{k}": items(*o)
        for k, o in (("trainingruns", []), ("modelartifacts", [ARTIFACT]), ("inferencedeployments", [CANARY, PROMOTED]))
    }
    artifact_served = {
        **CANARY,
        "status": {**CANARY["status"], "stable": {**CANARY["status"]["stable"], "modelVersion": "3"}},
    }
    answers[f"{SLIPWAY}/namespaces/team-a/inferencedeployments"] = items(artifact_served)
    code, out, err, _ = run(["get", "idep/digits", "-o", "json"], answers)
    assert code == 0, err
    assert [(o["kind"], o["metadata"]["name"]) for o in json.loads(out)["items"]] == [
        ("ModelArtifact", "digits"),
        ("InferenceDeployment", "digits"),
    ]


def test_history_reads_the_object_and_its_own_events():
    events = [
        *EVENTS,
        {**EVENTS[0], "message": "of an earlier object of that name", "involvedObject": {"uid": "another"}},
    ]
    answers = {
        f"{SLIPWAY}/namespaces/team-a/inferencedeployments/digits": ROLLED_BACK,
        "/api/v1/namespaces/team-a/events?fieldSelector=involvedObject.kind%3DInferenceDeployment%2C"
        "involvedObject.name%3Ddigits": {"items": events},
    }
    code, out, err, _ = run(["history", "digits"], answers)
    assert code == 0, err
    assert out.startswith("InferenceDeployment/digits  RolledBack\n")
    assert "AnalysisFailed errorRate=0.31; revision r3: Warning: rolled back digits version 3" in out
    assert "earlier object" not in out


DEPLOYMENTS = (
    "/apis/apps/v1/deployments?labelSelector=app.kubernetes.io%2Fname%3Dslipway%2C"
    "app.kubernetes.io%2Fcomponent%3Doperator"
)
IN_SYSTEM = DEPLOYMENTS.replace("/apis/apps/v1/", "/apis/apps/v1/namespaces/slipway-system/")


@pytest.mark.parametrize(
    "answers, code, out, err",
    [
        (
            {DEPLOYMENTS: {"items": [operator_deployment("ghcr.io/slipway-dev/slipway-operator:0.1.0")]}},
            0,
            f"plugin: {__version__}\noperator: 0.1.0 (slipway-system/slipway-operator, image "
            "ghcr.io/slipway-dev/slipway-operator:0.1.0, 2/2 ready)\n",
            "",
        ),
        (
            {DEPLOYMENTS: {"items": []}},
            0,
            f"plugin: {__version__}\noperator: not found (no Deployment labelled "
            "app.kubernetes.io/name=slipway,app.kubernetes.io/component=operator in any namespace)\n",
            "",
        ),
        # Listing everywhere refused: slipway-system only, and said so.
        (
            {DEPLOYMENTS: ApiError(403, "forbidden"), IN_SYSTEM: {"items": []}},
            0,
            f"plugin: {__version__}\noperator: not found (no Deployment labelled app.kubernetes.io/name=slipway,"
            "app.kubernetes.io/component=operator in namespace slipway-system (you may not list Deployments in every "
            "namespace))\n",
            "",
        ),
        (
            {DEPLOYMENTS: ApiError(None, "The connection to the server 127.0.0.1:1 was refused")},
            1,
            f"plugin: {__version__}\n",
            "error: operator: unknown; reading the operator Deployment: no answer from the "
            "API server (The connection to the server 127.0.0.1:1 was refused); check --kubeconfig and --context\n",
        ),
    ],
)
def test_version(answers, code, out, err):
    assert run(["version"], answers)[:3] == (code, out, err)


def test_version_of_the_plugin_alone_needs_no_cluster():
    out, err = io.StringIO(), io.StringIO()
    assert main.run(["version", "--client"], out, err, lambda *a: pytest.fail("connected")) == 0
    assert out.getvalue() == f"plugin: {__version__}\n"
