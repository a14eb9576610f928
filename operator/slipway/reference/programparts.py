"""What the pages of docs/reference/programs/ share, each from the code that sets or reads it: the
environment a builder sets, MLflow's credentials and TLS as pods get them, the MLflow tags a program
sets, the exit codes of Slipway's reference programs and a Job's podFailurePolicy in words."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from slipway import podspec
from slipway.mlflow.tag import Tag
from slipway.reference.common import GENERATED, escape
from slipway.workloads import common as workloads

# What each exit code of Slipway's reference programs (slipway.workloads.common.EXIT_*) means; a
# code without a line here, or a line without its code, fails the generator.
EXIT_MEANINGS = {
    "EXIT_OK": "Done.",
    "EXIT_ERROR": "Failed: any error not below (the log says which).",
    "EXIT_CONFIG": "Bad configuration: a flag or a variable, or a model that is not what was asked for (a digest "
    "mismatch). Running it again changes nothing.",
    "EXIT_MLFLOW_UNAVAILABLE": "MLflow did not answer through `SLIPWAY_MLFLOW_RETRY_SECONDS` (default 120) of "
    "retries (`EX_TEMPFAIL`): a later attempt may succeed.",
    "EXIT_TERMINATED": "Stopped by SIGTERM (a preemption, a suspend, a node drain), after a last checkpoint: the "
    "next attempt resumes (128 + 15, as a shell reports it).",
}

# How pods that talk to MLflow get its credentials: by reference to a Secret of their namespace.
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
# MLflow client's TLS variables as the pods get them (slipway.podspec.with_mlflow_tls); a variable
# podspec adds without a line here fails the generator.
TLS_ENV = {
    podspec.SERVER_CERT_ENV: "The CA bundle MLflow's certificate is checked against (the ConfigMap of "
    "`SLIPWAY_MLFLOW_CA_CONFIGMAP`, key `ca.crt`, mounted by reference), where the namespace has it.",
    podspec.CLIENT_CERT_ENV: "The client certificate and key presented to MLflow (the Secret of "
    "`SLIPWAY_MLFLOW_CLIENT_CERT_SECRET`, key `tls-combined.pem`, mounted by reference), where the namespace has it.",
    podspec.INSECURE_ENV: "`true` when the operator runs with `--mlflow-insecure-tls`: MLflow's certificate is not "
    "checked.",
}


def exit_codes() -> list[tuple[int, str, str]]:
    """(code, constant, meaning) of every exit code of the reference programs, by code."""
    found = {name: value for name, value in vars(workloads).items() if name.startswith("EXIT_")}
    if set(found) != set(EXIT_MEANINGS):
        raise SystemExit(
            f"slipway.reference.programparts: exit codes without a meaning {sorted(set(found) - set(EXIT_MEANINGS))}, "
            f"meanings without a code {sorted(set(EXIT_MEANINGS) - set(found))}"
        )
    return sorted((int(value), name, EXIT_MEANINGS[name]) for name, value in found.items())


def tls_env() -> dict[str, str]:
    """TLS_ENV, checked against the variables slipway.podspec gives pods."""
    if set(podspec.MLFLOW_TLS_ENV) != set(TLS_ENV):
        raise SystemExit(f"slipway.reference.programparts: TLS variables {sorted(podspec.MLFLOW_TLS_ENV)} differ")
    return TLS_ENV


def env_table(env: Mapping[str, str]) -> list[str]:
    lines = ["| variable | value |", "|---|---|"]
    return lines + [f"| `{name}` | {escape(value)} |" for name, value in env.items()]


def mlflow_access(who: str) -> list[str]:
    """How ``who`` (the containers that talk to MLflow) reach it: address, credentials, TLS."""
    lines = [
        "### MLflow's credentials and TLS",
        "",
        f"MLflow's credentials reach {who} by reference (`envFrom`) to the Secret the namespace names "
        "(annotation `slipway.dev/mlflow-credentials`, else `SLIPWAY_MLFLOW_CREDENTIALS_SECRET` in single-team "
        f"mode), when it exists: {', '.join(f'`{c}`' for c in CREDENTIALS)}, which MLflow's own client reads "
        "(and Slipway's). So do MLflow's TLS variables, where the operator is configured for them:",
        "",
        *env_table(tls_env()),
        "",
    ]
    return lines


def tags_table(tags: Iterable[Tag]) -> list[str]:
    """The tags a program sets: name, the name earlier versions read, what Slipway does with it."""
    lines = ["| tag | what Slipway reads it for | value | earlier name (still read) |", "|---|---|---|---|"]
    for tag in tags:
        name = f"`{tag.name}<key>`" if tag.family else f"`{tag.name}`"
        formerly = f"`{tag.formerly}`" if tag.formerly else ""
        lines.append(f"| {name} | {escape(tag.read_by)} | {escape(tag.meaning)} | {formerly} |")
    return lines


def exit_table(treatment: Mapping[int, str]) -> list[str]:
    """The reference programs' exit codes, and what Slipway does on each (``treatment``, by code)."""
    lines = ["| code | constant | the reference program means | Slipway |", "|---|---|---|---|"]
    for code, name, meaning in exit_codes():
        lines.append(f"| {code} | `{name}` | {escape(meaning)} | {escape(treatment.get(code, ''))} |")
    return lines


def policy_words(rules: list[dict[str, Any]], counted: str) -> list[str]:
    """A Job's podFailurePolicy rules in words, one bullet each; ``counted``: what a counted failure
    counts against."""
    said = []
    for rule in rules:
        action, codes = rule["action"], rule.get("onExitCodes")
        if codes is None:
            conditions = ", ".join(c["type"] for c in rule.get("onPodConditions") or [])
            what = f"A pod with condition {conditions} (preempted, evicted)"
        else:
            values = ", ".join(str(v) for v in codes["values"])
            what = f"Exit code {values}" if codes["operator"] == "In" else f"Any exit code but {values}"
        done = {
            "Ignore": "the pod is replaced, and the failure is not counted",
            "FailJob": "fails the Job at once, without retries",
            "Count": f"is retried, counting against {counted}",
        }[action]
        said.append(f"- {what}: {done}.")
    return said


def section(title: str, *paragraphs: str) -> list[str]:
    lines = [f"## {title}", ""]
    for paragraph in paragraphs:
        lines += [paragraph, ""]
    return lines


SOURCES = "the builders and decisions of operator/slipway (slipway.reference.programs)"
OTHERS = (
    "[trainer](trainer.md), [quantizer](quantizer.md), [evaluator](evaluator.md), "
    "[model server](server.md), [fetch-model](fetcher.md)"
)


def head(title: str, summary: str) -> list[str]:
    """A program page's title, the generated-file note, its summary and the links to the others."""
    return [f"# {title}", "", GENERATED.format(source=SOURCES), "", summary, "", f"The programs: {OTHERS}.", ""]
