"""docs/architecture.md shows the roles' order that import-linter enforces:
the list between its roles-order markers is the contract's layers, line for
line, so the page cannot drift from what `make check` holds."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_order_of_the_roles_is_the_contracts():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c.get("containers") == ["agents"]]
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- roles-order:[^>]*-->\n```\n(.*?)```\n<!-- /roles-order -->", page, re.S)
    assert block, "docs/architecture.md has no roles-order block"
    assert block[1].splitlines() == contract["layers"]


def test_the_doc_counts_the_imports_that_still_reach_up():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c.get("containers") == ["agents"]]
    page = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    count = len(contract.get("ignore_imports", []))
    said = {0: "No import still reaches up", 1: "One import still reaches up"}.get(
        count, f"{('Two', 'Three', 'Four', 'Five', 'Six')[count - 2]} imports still reach up"
    )
    assert said in page
