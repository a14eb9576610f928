"""The pages of the serving programs, the model server and the fetch-model init container, from
slipway.inference.build and slipway.inference.probes (see slipway.reference.programs)."""

from __future__ import annotations

from typing import Any, get_args

from slipway.inference import build as servebuild
from slipway.inference import probes
from slipway.inference.model import Analysis, Drain, InferenceDeploymentSpec, ModelLoad
from slipway.inference.providers import prometheus_queries as queries
from slipway.mlflow import tags
from slipway.reference.programparts import env_table, exit_table, head, mlflow_access, section
from slipway.workloads import common as workloads


def _serving_spec(preset: str) -> InferenceDeploymentSpec:
    """A spec whose analysis reads ``preset``: all the probes look at (a copy, so that a preset with
    requirements of its own elsewhere in the spec is shown too)."""
    spec = InferenceDeploymentSpec.model_validate({"model": {"name": "m", "alias": "a"}, "image": "i"})
    analysis = Analysis().model_copy(update={"preset": preset})
    return spec.model_copy(update={"rollout": spec.rollout.model_copy(update={"analysis": analysis})})


def server() -> str:
    spec = InferenceDeploymentSpec.model_validate({"model": {"name": "m", "alias": "a"}, "image": "i"})
    drain = Drain()
    lines = head(
        "Model server",
        "An InferenceDeployment runs your model server (`spec.image`, `spec.command`, `spec.args`) in the "
        "container `server` of a Deployment per track (stable, canary), behind a Service. Slipway's own is "
        "`python -m slipway.workloads.serve` in its workloads image; vLLM's OpenAI server is another (preset "
        "`vllm`).",
    )
    lines += ["## Environment", "", *env_table(servebuild.SERVER_ENV), ""]
    lines += mlflow_access(
        "the server container (unless `spec.modelLoad` fetches the model: then only the init container talks to MLflow)"
    )
    lines += section(
        "The model",
        "Load the version at `SLIPWAY_MODEL_URI` from MLflow, or, with `spec.modelLoad`, the files the "
        "[fetch-model](fetcher.md) init container put at `SLIPWAY_MODEL_PATH` (read-only, default "
        f"`{ModelLoad().path}`), digest checked: then the server needs no MLflow at all.",
    )
    lines += _probes(spec)
    lines += section(
        "Stopping",
        f"A stopping pod keeps serving for `spec.drain.delaySeconds` (default {drain.delay_seconds}, a preStop "
        "sleep) while its endpoint is dropped; then it gets SIGTERM and has `spec.drain.maxRequestSeconds` "
        f"(default {drain.max_request_seconds}) to finish what is in flight (`terminationGracePeriodSeconds` is "
        "their sum). Stop taking new connections on SIGTERM and answer those in flight.",
        "Exit codes: any exit restarts the container (a Deployment's pods always restart); a canary whose pods "
        "do not become ready within the rollout's progress deadline is rolled back.",
    )
    lines += _metrics()
    return "\n".join(lines)


def _probes(spec: InferenceDeploymentSpec) -> list[str]:
    lines = [
        "## Port and probes",
        "",
        f"Listen on `PORT` (`spec.port`, default {spec.port}; the container port `http`). Slipway's probes, "
        "HTTP GET on that port (`spec.probes` overrides any field):",
        "",
        "| probe | path | every (s) | timeout (s) | failures |",
        "|---|---|---|---|---|",
    ]
    for kind in ("startup", "readiness", "liveness"):
        body = probes.probe(spec, kind)
        paths = {p: probes.probe(_serving_spec(p), kind)["httpGet"]["path"] for p in get_args(_preset_type())}
        shown = ", ".join(
            f"`{path}` ({', '.join(k for k, v in paths.items() if v == path)})"
            for path in dict.fromkeys(paths.values())
        )
        lines.append(
            f"| {kind} | {shown} | {body.get('periodSeconds', '')} | {body.get('timeoutSeconds', 1)} | "
            f"{body.get('failureThreshold', '')} |"
        )
    lines += [
        "",
        "The paths depend on `spec.rollout.analysis.preset` (in brackets). Startup gives a large model "
        "time to load before liveness may restart it; readiness takes the pod in and out of the Service.",
        "",
    ]
    return lines


def _preset_type() -> Any:
    return Analysis.model_fields["preset"].annotation


def _metrics() -> list[str]:
    lines = [
        "## Metrics",
        "",
        "Prometheus scrapes `/metrics` on `PORT` (the pods' annotations `prometheus.io/scrape`, `port`, `path`), "
        f"and keeps the pods' labels as `{queries.TRACK_LABEL}`, `{queries.REVISION_LABEL}` and "
        f"`{queries.VERSION_LABEL}` (its labelmap of the pod labels). The canary analysis's built-in metrics read "
        "these series, by preset (the `gateway` preset reads the gateway's instead, for a server with no metrics "
        "of its own):",
        "",
        "| preset | requests (counter) | failed | latency (histogram) | time to first token | time per token | "
        "generated tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in queries.PRESETS.items():
        tpot = ", ".join(f"`{t}`" for t in p.tpot)
        lines.append(
            f"| {name} | `{p.requests}` | `{p.failed_requests}` | `{p.latency}` | `{p.ttft}` | {tpot} | "
            f"`{p.output_tokens}` |"
        )
    return [*lines, ""]


def fetcher() -> str:
    lines = head(
        "Fetch-model",
        "With `spec.modelLoad`, each serving pod first runs an init container `fetch-model` that puts the "
        "version's files in a volume the server reads: any server image then finds the model on disk. "
        "Its image is the operator's `SLIPWAY_FETCH_IMAGE`, else its workloads image; its command `"
        f"{' '.join(servebuild.FETCH_COMMAND)}` (Slipway's fetcher).",
    )
    lines += ["## Environment", "", *env_table(servebuild.FETCH_ENV), ""]
    lines += ["Variables of spec.env named `SLIPWAY_MODEL_*` or `MLFLOW_*` reach it too.", ""]
    lines += mlflow_access("the fetch-model container")
    lines += section(
        "Files",
        "Write the version's files (those of its source, for a `models:/` URI) into `SLIPWAY_MODEL_PATH`, an "
        "emptyDir the server mounts read-only there; with a cache claim, at "
        f"`{servebuild.CACHE_PATH}` (`SLIPWAY_MODEL_CACHE`), keep them per model and version. Check every file "
        f"against `{servebuild.FILES_DIGEST_ENV}` (else the version's tag `{tags.SOURCE_DIGEST.name}`, else the "
        f"model file against `{tags.DIGEST.name}`), and on a mismatch leave nothing and exit 2: a server never "
        "starts on files that are not the validated version's.",
    )
    treatment = {
        workloads.EXIT_OK: "The server container starts.",
        workloads.EXIT_CONFIG: "The pod does not start; the kubelet retries the init container with backoff, and "
        "status names the pod's problem.",
        workloads.EXIT_MLFLOW_UNAVAILABLE: "Retried by the kubelet (the pod's restart policy) with backoff.",
    }
    lines += ["## Exit codes", "", *exit_table(treatment), ""]
    return "\n".join(lines)
