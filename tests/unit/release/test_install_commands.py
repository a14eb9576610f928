"""Every shell command of README.md and docs/ (blocks marked sh, bash, console or shell) runs as
written, as far as can be told without a cluster, a registry or a network.

Each command is sorted by what it needs (``NEEDS``); what needs nothing is run or resolved here:
``make`` targets by ``make -n``, ``kubectl slipway`` arguments by the plugin's own parser, ``pipx`` and
``pip`` installs by the paths they name. A command that needs a cluster, a registry, Docker or a
service is checked for what it names: kustomize directories and files of this repository, or files a
release directory holds (as release/bundle.py lists them); Helm charts, their values and the release
namespaces the install guide uses. A program the table does not know fails the test: a new kind of
command in the docs is sorted here first.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from slipway_testing.docs import SHELL_LANGS, Block, blocks, pages, shell_commands
from slipway_testing.release import load

ROOT = Path(__file__).resolve().parents[3]
VERSION = load("versioning").stamped(ROOT)
# The releases the install guide makes, and their one namespace (an upgrade names it too).
RELEASE_NAMESPACES = {"slipway": "slipway-system", "slipway-crds": "slipway-system"}
CHARTS = {"slipway": ROOT / "charts" / "slipway", "slipway-crds": ROOT / "charts" / "slipway-crds"}


@dataclass(frozen=True)
class Command:
    where: str
    argv: tuple[str, ...]
    made: frozenset[str]  # files an earlier command of its block wrote (``> FILE``)


def documented() -> list[Command]:
    found = []
    for path in pages():
        for block in blocks(path, SHELL_LANGS):
            found += commands_of(block)
    return found


def commands_of(block: Block) -> list[Command]:
    made: set[str] = set()
    out = []
    for argv in shell_commands(block):
        out.append(Command(block.where, argv, frozenset(made)))
        made |= {argv[i + 1] for i, token in enumerate(argv[:-1]) if token == ">"}
    return out


def release_patterns() -> list[re.Pattern[str]]:
    """The names of a release directory's files, from release/bundle.py's own list (X.Y.Z: the version)."""
    names = []
    for line in (load("bundle").__doc__ or "").splitlines():
        first = re.split(r"\s{2,}", line.strip())[0]
        if line.startswith("    ") and first and not first.startswith("("):  # not a description's second line
            names += re.split(r",\s*", first)
    patterns = []
    for name in names:
        text = re.escape(name).replace(re.escape("X.Y.Z"), re.escape(VERSION)).replace(r"\*", r"[^/]*")
        text = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(" + m.group(1).replace(",", "|") + ")", text)
        patterns.append(re.compile(text))
    return patterns


RELEASE_FILES = release_patterns()


def file_problem(name: str, made: frozenset[str] = frozenset()) -> str | None:
    """None when ``name`` is a file of this repository, one an earlier command wrote, or one a release
    directory holds (by itself, or as dist/VERSION/NAME, where `make release` writes it)."""
    if (ROOT / name).exists() or name in made:
        return None
    base = name.removeprefix(f"dist/{VERSION}/")
    if "/" not in base and any(p.fullmatch(base) for p in RELEASE_FILES):
        return None
    return f"{name}: neither in this repository nor a file of a release directory (release/bundle.py)"


def option(argv: tuple[str, ...], *names: str) -> list[str]:
    """The values of ``names`` (``-f X`` and ``-f=X`` alike), in order."""
    values = [argv[i + 1] for i, token in enumerate(argv[:-1]) if token in names]
    return values + [token.split("=", 1)[1] for token in argv if token.split("=", 1)[0] in names and "=" in token]


def positional(argv: tuple[str, ...], takes_value: set[str]) -> list[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in takes_value:
            skip = True
        elif not token.startswith("-"):
            out.append(token)
    return out


def run_make(cmd: Command) -> list[str]:
    targets = [a for a in cmd.argv[1:] if not a.startswith("-") and "=" not in a]
    done = subprocess.run(["make", "-n", *targets], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return [] if done.returncode == 0 else [f"make -n {' '.join(targets)}: {done.stderr.strip()}"]


def check_install(cmd: Command) -> list[str]:
    """pip/pipx install: a path (this project, or the wheel a release holds), never the package index."""
    if cmd.argv[1:2] != ("install",):
        return [f"{cmd.argv[0]} {cmd.argv[1:2]}: only install is sorted"]
    problems = []
    for target in positional(cmd.argv[2:], set()):
        if target == ".":
            scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
            problems += [] if "kubectl-slipway" in scripts else [". installs no kubectl-slipway"]
        elif "/" not in target and not target.endswith(".whl"):
            problems.append(f"{target}: Slipway is on no package index: install . or the release's wheel")
        else:
            problems += [p for p in [file_problem(target)] if p]
    return problems


def value_problems(chart: Path, sets: list[str]) -> list[str]:
    defaults: Any = yaml.safe_load((chart / "values.yaml").read_text()) or {}
    problems = []
    for key in (s.split("=", 1)[0] for s in sets):
        node = defaults
        for part in key.split("."):
            if isinstance(node, dict) and not node and part:
                break  # a map empty by default takes any key (labels, prices)
            if not isinstance(node, dict) or part not in node:
                problems.append(f"--set {key}: {chart.relative_to(ROOT)}/values.yaml has no such value")
                break
            node = node[part]
    return problems


def check_helm(cmd: Command) -> list[str]:
    """helm install/upgrade: a chart of this repository or of a release, values it has, the release
    in the namespace the install guide gives it."""
    argv = cmd.argv[1:]
    if argv[:1] not in (("install",), ("upgrade",)):
        return [f"helm {argv[:1]}: only install and upgrade are sorted"]
    name, chart = positional(argv[1:], {"-n", "--namespace", "--set", "-f", "--values", "--version"})[:2]
    packaged = re.fullmatch(rf"(slipway(?:-crds)?)-{re.escape(VERSION)}\.tgz", chart)
    source = CHARTS.get(packaged.group(1)) if packaged else ROOT / chart
    if source is None or not (source / "Chart.yaml").is_file():
        return [f"{chart}: not a chart of this repository or of a release"]
    problems = [p for p in [file_problem(chart)] if p] if packaged else []
    namespace = (option(argv, "-n", "--namespace") or ["default"])[-1]
    want = RELEASE_NAMESPACES.get(name)
    if want and namespace != want:
        problems.append(f"release {name} in namespace {namespace}: the install guide puts it in {want}")
    return problems + value_problems(source, option(argv, "--set"))


def check_kubectl(cmd: Command) -> list[str]:
    argv = cmd.argv[1:]
    verb = positional(argv, {"-n", "--namespace", "--context", "--kubeconfig"})[:1]
    if verb == ["slipway"]:  # the plugin: its own parser reads the arguments
        from slipway.cli.args import parser

        try:
            parser().parse_args(list(argv[argv.index("slipway") + 1 :]))
        except SystemExit:
            return [f"kubectl slipway {' '.join(argv[argv.index('slipway') + 1 :])}: the plugin refuses it"]
        return []
    problems = [
        f"{d}: no kustomization.yaml"
        for d in option(argv, "-k", "--kustomize")
        if not (ROOT / d / "kustomization.yaml").is_file()
    ]
    files = option(argv, "-f", "--filename", "--patch-file")
    return problems + [p for p in (file_problem(f, cmd.made) for f in files if f != "-") if p]


# What a command reads, for the programs that read files: each is a file of this repository, of a
# release directory, or one an earlier command of the block wrote.
FILES_READ: dict[str, Callable[[tuple[str, ...]], list[str]]] = {
    "bash": lambda argv: positional(argv[1:], set())[:1],
    "install": lambda argv: positional(argv[1:], {"-m", "--mode", "-o", "-g", "-t"})[:-1],
    "sha256sum": lambda argv: option(argv, "-c", "--check"),
    "ssh-keygen": lambda argv: option(argv, "-s", "-f", "<"),
    "sed": lambda argv: positional(argv[1:], {"-e"})[1:],
    "skopeo": lambda argv: [a.removeprefix("oci-archive:") for a in argv if a.startswith("oci-archive:")],
    "docker": lambda argv: option(argv, "-f", "--file"),
    "echo": lambda argv: [],
}


def check_files_read(cmd: Command) -> list[str]:
    return [p for p in (file_problem(f, cmd.made) for f in FILES_READ[cmd.argv[0]](cmd.argv)) if p]


def check_cd(cmd: Command) -> list[str]:
    """The one directory a page changes into: the release `make release` writes."""
    return (
        [] if cmd.argv[1:] == (f"dist/{VERSION}",) else [f"cd {' '.join(cmd.argv[1:])}: the release is dist/{VERSION}"]
    )


OFFLINE, CLUSTER, REGISTRY, SERVICE, SHELL = "offline", "cluster", "registry or docker", "a service", "shell"
# program -> (what it needs to run, the check made here)
NEEDS: dict[str, tuple[str, Callable[[Command], list[str]]]] = {
    "make": (OFFLINE, run_make),
    "pipx": (OFFLINE, check_install),
    "pip": (OFFLINE, check_install),
    "bash": (OFFLINE, check_files_read),
    "install": (OFFLINE, check_files_read),
    "cd": (OFFLINE, check_cd),
    "echo": (OFFLINE, check_files_read),
    "sha256sum": (OFFLINE, check_files_read),
    "ssh-keygen": (OFFLINE, check_files_read),
    "sed": (OFFLINE, check_files_read),
    "kubectl": (CLUSTER, check_kubectl),
    "helm": (CLUSTER, check_helm),
    "skopeo": (REGISTRY, check_files_read),
    "docker": (REGISTRY, check_files_read),
    "curl": (SERVICE, lambda cmd: []),
    "for": (SHELL, lambda cmd: []),
    "do": (SHELL, lambda cmd: []),
    "done": (SHELL, lambda cmd: []),
}


def check(cmd: Command) -> tuple[str, list[str]]:
    """What ``cmd`` needs to run, and what is wrong with it as far as can be told here."""
    program = cmd.argv[0]
    if re.fullmatch(r"[A-Za-z_]\w*=.*", program, re.S):
        return SHELL, []  # a variable assignment
    if program not in NEEDS:
        return "unknown", [f"{program}: a program this test does not sort; add it to NEEDS"]
    need, checker = NEEDS[program]
    return need, checker(cmd)


COMMANDS = documented()


@pytest.mark.parametrize("cmd", COMMANDS, ids=[f"{c.where}:{c.argv[0]}" for c in COMMANDS])
def test_each_documented_command_runs_as_written(cmd):
    need, problems = check(cmd)
    assert problems == [], f"{cmd.where}: {' '.join(cmd.argv)} ({need})"


def test_the_install_pages_give_commands_of_each_kind():
    needs = {check(c)[0] for c in COMMANDS if c.where.startswith(("README.md", "docs/install.md"))}
    assert {OFFLINE, CLUSTER, REGISTRY} <= needs
    programs = {c.argv[0] for c in COMMANDS if c.where.startswith("README.md")}
    assert {"make", "kubectl", "helm"} <= programs


def sample(text: str) -> Command:
    (argv,) = shell_commands(Block(ROOT / "README.md", 1, "sh", "", text))
    return Command("sample", argv, frozenset())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("make nosuch-target", "make -n nosuch-target"),
        ("pipx install slipway-operator", "on no package index"),
        ("pip install dist/9.9.9/slipway_operator-9.9.9-py3-none-any.whl", "neither in this repository"),
        ("helm install slipway-crds charts/slipway-crds", "in namespace default"),
        ("helm upgrade slipway charts/slipway -n slipway-system --set nosuch.value=1", "no such value"),
        ("helm install slipway charts/nosuch -n slipway-system", "not a chart"),
        ("helm install slipway slipway-9.9.9.tgz -n slipway-system", "not a chart"),
        ("kubectl apply --server-side -k nowhere/", "no kustomization.yaml"),
        ("kubectl apply -f nowhere/install.yaml", "neither in this repository"),
        ("kubectl slipway no-such-command digits", "the plugin refuses it"),
        ("skopeo copy oci-archive:slipway-operator-9.9.9.oci.tar docker://r/x:1", "neither in this repository"),
        ("cd dist/9.9.9", "the release is dist/"),
        ("install -D -m 0755 dist/9.9.9/kubectl-slipway.pyz ~/.local/bin/kubectl-slipway", "neither in this"),
        ("frobnicate --all", "does not sort"),
    ],
)
def test_a_command_that_would_not_run_is_named(text, problem):
    _, problems = check(sample(text))
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "text",
    [
        "helm upgrade slipway charts/slipway -n slipway-system --set monitoring.serviceMonitor.labels.release=x",
        f"helm install slipway-crds slipway-crds-{VERSION}.tgz -n slipway-system --create-namespace",
        f"sha256sum -c SHA256SUMS && kubectl apply --server-side -f install.yaml && cd dist/{VERSION}",
        "kubectl slipway wait idep/digits --for=Promoted --timeout=2m",
        f"pipx install dist/{VERSION}/slipway_operator-{VERSION}-py3-none-any.whl",
        f"install -D -m 0755 dist/{VERSION}/kubectl-slipway.pyz ~/.local/bin/kubectl-slipway",
    ],
)
def test_a_command_that_runs_is_not_refused(text):
    block = Block(ROOT / "README.md", 1, "sh", "", text)
    assert [p for c in commands_of(block) for p in check(c)[1]] == []
