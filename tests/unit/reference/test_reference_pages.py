"""docs/reference/ is what the code generates: each committed page is compared with its generator's
output (as `slipway.crdgen --check` holds crds/ to the models). On a difference: `make reference`."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway import reference
from slipway.reference import kubectl, labels
from slipway.reference.__main__ import main

ROOT = Path(__file__).resolve().parents[3]
PAGES = reference.pages()


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_committed_page_is_what_the_code_generates(name: str) -> None:
    path = ROOT / "docs" / "reference" / name
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing: run `make reference`"
    assert path.read_text() == PAGES[name](), f"{path.relative_to(ROOT)} is stale: run `make reference`"


def test_every_page_is_in_the_reference_nav() -> None:
    nav = (ROOT / "docs" / "reference" / "index.md").read_text()
    assert [name for name in PAGES if f"\n{name.removesuffix('.md')}\n" not in nav] == []


def test_every_slipway_dev_name_of_the_code_is_documented_and_no_other() -> None:
    code = labels.names_in_code()
    assert "slipway.dev/abort" in code and "slipway.dev/allowed-models" in code  # the scan finds constants
    assert code == set(labels.NAMES)


def test_the_plugin_page_does_not_depend_on_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = kubectl.markdown()
    monkeypatch.setenv("COLUMNS", "40")
    assert kubectl.markdown() == wide
    assert "kubectl slipway wait" in wide and "--timeout" in wide


def test_check_fails_on_a_stale_page_and_passes_once_written_again(tmp_path: Path) -> None:
    assert main(["--check", str(tmp_path)]) == 1  # nothing written yet
    assert main([str(tmp_path)]) == 0
    assert main(["--check", str(tmp_path)]) == 0
    page = tmp_path / "metrics.md"
    page.write_text(page.read_text().replace("slipway_leader", "slipway_leader_renamed"))
    assert main(["--check", str(tmp_path)]) == 1
