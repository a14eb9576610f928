"""What the generated pages share: their header and table cells."""

GENERATED = "<!-- Generated from {source} by `make reference`: do not edit by hand. -->"


def escape(text: str) -> str:
    """Text that stays in one Markdown table cell: no pipe, no line break."""
    return " ".join(text.replace("|", "\\|").split())
