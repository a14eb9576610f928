"""Sphinx settings of Slipway's documentation site: `make docs` builds it strictly (every warning,
a link to a page or heading that does not exist among them, fails the build) into docs/_build/html.
Pages are Markdown read by MyST; docs/reference/ is generated from the code (`make reference`)."""

project = "Slipway"
author = "the Slipway authors"
copyright = "the Slipway authors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings get anchors down to ####, so that [text](page.md#a-heading) is checked at build time.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

html_theme = "furo"
html_title = "Slipway"
html_show_sourcelink = False
