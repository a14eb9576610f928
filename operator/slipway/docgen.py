"""Writes the generated reference pages of the documentation (``docs/reference/``) from the code:
the condition reasons (slipway.reasons) and the operator's settings (slipway.settings). ``--check``
fails when a committed page differs from what the code generates (the drift check, as
``slipway.crdgen --check`` for the CRDs).

    python -m slipway.docgen docs/reference          # write the pages
    python -m slipway.docgen --check docs/reference  # exit 1 if one is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from slipway import reasons, settings

# A generated page is in no toctree until the site links it: orphan keeps the strict build quiet.
FRONT_MATTER = "---\norphan: true\n---\n\n"

PAGES: dict[str, Callable[[], str]] = {
    "reasons.md": reasons.markdown,
    "settings.md": settings.markdown,
}


def render(page: str) -> str:
    return FRONT_MATTER + PAGES[page]()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slipway.docgen", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, nargs="?", default=Path("docs/reference"),
                        help="where the pages live (default docs/reference)")  # fmt: skip
    parser.add_argument("--check", action="store_true", help="fail if a page differs from what the code generates")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        path: Path = args.directory / page
        text = render(page)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run `python -m slipway.docgen {args.directory}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
