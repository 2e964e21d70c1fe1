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
    said = {0: "No import reaches up", 1: "One import still reaches up"}.get(
        count, f"{('Two', 'Three', 'Four', 'Five', 'Six')[count - 2]} imports still reach up"
    )
    assert said in page


def test_the_unit_of_works_state_is_the_only_context_variable():
    """Ambient state lives in crm/context.py alone: a reader of any other
    module sees everything a call depends on in its arguments or there."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    product = [f for f in files if f.split("/")[0] in ("crm", "approvals", "agents", "leadops")]
    holders = [f for f in product if "ContextVar(" in (ROOT / f).read_text()]
    assert holders == ["crm/context.py"]
