"""``python -m slipway.reference [--check] [DIRECTORY]``: write or check docs/reference/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slipway.reference import pages


def main(argv: list[str] | None = None) -> int:
    what = "Write the generated pages of docs/reference/ from the code."
    parser = argparse.ArgumentParser(prog="python -m slipway.reference", description=what)
    parser.add_argument(
        "directory",
        type=Path,
        nargs="?",
        default=Path("docs/reference"),
        help="where the pages live (default docs/reference)",
    )
    parser.add_argument("--check", action="store_true", help="fail if a page differs from what the code generates")
    args = parser.parse_args(argv)
    stale = []
    for name, render in pages().items():
        path: Path = args.directory / name
        text = render()
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run `make reference`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
