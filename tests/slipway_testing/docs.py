"""The code blocks of the documentation (README.md, docs/), as a reader copies them: each fenced
block with its language, the file and line it starts on, and the heading it sits under; a shell
block's simple commands, as the shell splits them."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from slipway_testing import ROOT

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
HEADING = re.compile(r"^(#{1,6}) +(.+?) *$", re.M)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    heading: str  # the nearest heading above it ("" before the first)
    text: str  # the block's lines, its indentation removed

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page of docs/ (not the built site)."""
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]


def blocks(path: Path, langs: set[str] | None = None) -> list[Block]:
    """The fenced code blocks of ``path`` (of ``langs`` only, when given), in order."""
    text = path.read_text()
    headings = [(m.start(), m.group(2)) for m in HEADING.finditer(text)]
    found = []
    for m in FENCE.finditer(text):
        if langs is not None and m.group("lang") not in langs:
            continue
        indent = len(m.group("indent"))
        body = "".join(line[indent:] for line in m.group("body").splitlines(keepends=True))
        heading = next((h for at, h in reversed(headings) if at < m.start()), "")
        found.append(Block(path, text.count("\n", 0, m.start()) + 1, m.group("lang"), heading, body))
    return found


SHELL_LANGS = {"sh", "bash", "console", "shell"}
SEPARATORS = set(";&|")


def logical_lines(text: str) -> Iterator[str]:
    """A shell block's lines as the shell reads them: a line ending in a backslash, or inside an open
    quote, goes on in the next."""
    pending = ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote
            continue
        yield pending
        pending = ""
    if pending:
        yield pending


def shell_commands(block: Block) -> list[tuple[str, ...]]:
    """The simple commands of a shell block, comments left out, split at ``;``, ``&&``, ``||`` and
    ``|`` (redirections stay in the command as tokens: ``>``, ``<``)."""
    found: list[tuple[str, ...]] = []
    for line in logical_lines(block.text):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        command: list[str] = []
        for token in lexer:
            if set(token) <= SEPARATORS:
                found += [tuple(command)] if command else []
                command = []
            else:
                command.append(token)
        found += [tuple(command)] if command else []
    return found
