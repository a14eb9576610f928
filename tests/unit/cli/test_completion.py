"""kubectl slipway completion: the scripts are made from the parser, bash parses its script, and the bash
completion function, run by bash itself, offers the commands, a command's flags and kinds, and a flag's
choices."""

from __future__ import annotations

import io
import shlex
import subprocess

import pytest

from slipway.cli import completion, main
from slipway.cli.args import parser


def script(shell: str) -> str:
    out = io.StringIO()
    assert main.run(["completion", shell], out, io.StringIO(), lambda *a: pytest.fail("connected")) == 0
    return out.getvalue()


def test_bash_parses_the_bash_script(tmp_path):
    path = tmp_path / "kubectl-slipway.bash"
    path.write_text(script("bash"))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def complete(words: list[str]) -> list[str]:
    """What bash offers for the last of ``words`` (the command line so far), from the script."""
    program = "\n".join(
        [
            script("bash"),
            f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})",
            f"COMP_CWORD={len(words) - 1}",
            "_kubectl_slipway",
            'printf "%s\\n" "${COMPREPLY[@]}"',
        ]
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize(
    "words, offered",
    [
        (["kubectl-slipway", ""], {"get", "list", "history", "wait", "promote", "version", "completion", "-n"}),
        (["kubectl-slipway", "h"], {"history"}),
        (["kubectl-slipway", "get", ""], {"idep", "inferencedeployment", "tr", "ma", "-w", "--watch", "-o"}),
        (["kubectl-slipway", "-n", "team-a", "list", "-"], {"-A", "--all-namespaces", "-o", "--output", "-n"}),
        (["kubectl-slipway", "list", "-o", ""], {"json", "yaml"}),
        (["kubectl-slipway", "get", "idep/x", "--output", "y"], {"yaml"}),
        (["kubectl-slipway", "completion", ""], {"bash", "zsh"}),
        (["kubectl-slipway", "version", "--c"], {"--client", "--context"}),
        (["kubectl-slipway", "wait", "idep/x", "--"], {"--for", "--timeout", "--kubeconfig"}),
    ],
)
def test_bash_offers(words: list[str], offered: set[str]):
    got = set(complete(words))
    assert offered <= got, got


def test_bash_offers_nothing_where_a_free_value_goes():
    assert complete(["kubectl-slipway", "get", "-n", ""]) == []
    assert complete(["kubectl-slipway", "wait", "idep/x", "--timeout", ""]) == []


def test_every_command_and_flag_of_the_parser_is_in_both_scripts():
    top, commands = completion.commands(parser())
    bash, zsh = script("bash"), script("zsh")
    assert {c.name for c in commands} == {
        "get",
        "list",
        "history",
        "wait",
        "promote",
        "abort",
        "retry",
        "pause",
        "resume",
        "version",
        "completion",
    }
    for command in commands:
        assert f"        {command.name}) words=" in bash
        assert f"                {command.name}) _arguments " in zsh
        assert f"'{command.name}:" in zsh
        for option in command.options:
            for flag in option.flags:
                assert flag in bash and flag in zsh
    assert zsh.startswith("#compdef kubectl-slipway\n") and "compdef _kubectl-slipway kubectl-slipway" in zsh
    assert "'(-o --output)'{-o,--output}'[print the objects as JSON or YAML instead of text]:output:(json yaml)'" in zsh
    assert "'--kubeconfig[kubeconfig file]:kubeconfig:_files'" in zsh


def test_zsh_specs_escape_what_zsh_would_read_as_syntax():
    assert completion._text("the plugin's version (a note); more") == "the plugin'\\''s version"
    assert completion._text("with --watch: stop [now]") == "with --watch\\: stop (now)"
