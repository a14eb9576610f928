"""``kubectl slipway completion bash|zsh`` (pure: no I/O): completion scripts made from the argument
parser itself (its commands, their flags, the flags' choices) and the kinds' names, so a command
or a flag added to :mod:`slipway.cli.args` completes without an edit here."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from slipway.cli.refs import KINDS

PROGRAM = "kubectl-slipway"
KIND_WORDS = tuple(name for kind in KINDS for name in (kind.singular, kind.short))
KIND_METAVARS = ("KIND/NAME", "KIND")  # positionals that start with a kind


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    takes_value: bool
    choices: tuple[str, ...]
    files: bool  # its value is a file (--kubeconfig)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    words: tuple[str, ...]  # what its positional may be: its choices, or the kinds' names


def _option(action: argparse.Action) -> Option:
    takes_value = action.nargs != 0
    choices = tuple(str(c) for c in action.choices or ())
    return Option(tuple(action.option_strings), action.help or "", takes_value, choices, action.dest == "kubeconfig")


def _positional_words(action: argparse.Action) -> tuple[str, ...]:
    if action.choices:
        return tuple(str(c) for c in action.choices)
    return KIND_WORDS if action.metavar in KIND_METAVARS else ()


def commands(parser: argparse.ArgumentParser) -> tuple[tuple[Option, ...], tuple[Command, ...]]:
    """The top-level options and each command with its options and positional words."""
    top = tuple(_option(a) for a in parser._actions if a.option_strings)
    found: list[Command] = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            options = tuple(_option(a) for a in sub._actions if a.option_strings)
            words = tuple(w for a in sub._actions if not a.option_strings for w in _positional_words(a))
            found.append(Command(name, helps.get(name, ""), options, words))
    return top, tuple(found)


def _value_flags(top: tuple[Option, ...], found: tuple[Command, ...]) -> dict[str, Option]:
    """Every flag that takes a value, whichever command it belongs to."""
    return {flag: o for o in (*top, *(o for c in found for o in c.options)) if o.takes_value for flag in o.flags}


def bash(parser: argparse.ArgumentParser) -> str:
    top, found = commands(parser)
    values = _value_flags(top, found)
    top_words = [c.name for c in found] + [f for o in top for f in o.flags]
    skip = "|".join(f for o in top if o.takes_value for f in o.flags)
    lines = [
        f"# bash completion for {PROGRAM} (kubectl slipway), made by `{PROGRAM} completion bash`.",
        f"# source <({PROGRAM} completion bash), or save it as ~/.local/share/bash-completion/completions/{PROGRAM}",
        "_kubectl_slipway() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local command="" words i',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in',
        f"            {skip}) ((i++)) ;;",
        f'            {"|".join(c.name for c in found)}) command="${{COMP_WORDS[i]}}"; break ;;',
        "        esac",
        "    done",
        '    case "$prev" in',
    ]
    for flag, option in sorted(values.items()):
        if option.files:
            action = 'COMPREPLY=($(compgen -f -- "$cur"))'
        elif option.choices:
            action = f'COMPREPLY=($(compgen -W "{" ".join(option.choices)}" -- "$cur"))'
        else:
            action = "COMPREPLY=()"
        lines.append(f"        {flag}) {action}; return ;;")
    lines += ["    esac", '    case "$command" in', f'        "") words="{" ".join(top_words)}" ;;']
    for command in found:
        words = [*command.words, *(f for o in command.options for f in o.flags)]
        lines.append(f'        {command.name}) words="{" ".join(words)}" ;;')
    lines += [
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        f"complete -F _kubectl_slipway {PROGRAM}",
    ]
    return "\n".join(lines) + "\n"


def _text(text: str) -> str:
    """A help text inside a zsh single-quoted spec: its first clause without asides, no brackets, quotes
    and colons escaped."""
    first = re.sub(r" \([^()]*\)", "", text).split("; ")[0]
    return first.replace("[", "(").replace("]", ")").replace("'", "'\\''").replace(":", "\\:")


def _zsh_option(option: Option) -> str:
    value = ""
    if option.takes_value:
        label = option.flags[-1].lstrip("-")
        action = "_files" if option.files else (f"({' '.join(option.choices)})" if option.choices else " ")
        value = f":{label}:{action}"
    if len(option.flags) == 1:
        return f"'{option.flags[0]}[{_text(option.help)}]{value}'"
    exclusive = " ".join(option.flags)
    return f"'({exclusive})'{{{','.join(option.flags)}}}'[{_text(option.help)}]{value}'"


def zsh(parser: argparse.ArgumentParser) -> str:
    top, found = commands(parser)
    function = f"_{PROGRAM}"
    lines = [
        f"#compdef {PROGRAM}",
        f"# zsh completion for {PROGRAM} (kubectl slipway), made by `{PROGRAM} completion zsh`.",
        f"# Save it as {function} in a directory of $fpath, or source it after compinit.",
        f"compdef {function} {PROGRAM}",
        "",
        f"{function}() {{",
        '    local curcontext="$curcontext" state line',
        "    local -a commands",
        "    commands=(",
        *(f"        '{c.name}:{_text(c.help).replace(chr(92) + ':', ':')}'" for c in found),
        "    )",
        "    _arguments -C \\",
        *(f"        {_zsh_option(o)} \\" for o in top),
        "        '1: :->command' \\",
        "        '*:: :->argument'",
        "    case $state in",
        "        command) _describe -t commands 'kubectl slipway command' commands ;;",
        "        argument)",
        "            case $line[1] in",
    ]
    for command in found:
        words = f"'*:{command.name} argument:({' '.join(command.words)})'" if command.words else "'*: :'"
        specs = " ".join([*(_zsh_option(o) for o in command.options), words])
        lines.append(f"                {command.name}) _arguments {specs} ;;")
    lines += [
        "            esac ;;",
        "    esac",
        "}",
        "",
        f'if [ "$funcstack[1]" = "{function}" ]; then',
        f'    {function} "$@"',
        "fi",
    ]
    return "\n".join(lines) + "\n"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    return bash(parser) if shell == "bash" else zsh(parser)
