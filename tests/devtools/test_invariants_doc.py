"""docs/invariants.md names the tests that guard each numbered promise the
code cites; a renamed or deleted test must not leave the page pointing at
nothing, and every number a comment cites must be on the page."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "invariants.md").read_text()


def test_every_test_the_page_names_exists():
    cited = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", PAGE)
    assert len(cited) >= 20
    missing = []
    for path, name in cited:
        file = ROOT / path
        if not file.exists():
            missing.append(path)
            continue
        if name:
            names = {n.name for n in ast.walk(ast.parse(file.read_text())) if isinstance(n, ast.FunctionDef)}
            if name not in names:
                missing.append(f"{path}::{name}")
    assert not missing, missing


def test_every_invariant_a_comment_cites_is_on_the_page():
    listed = {int(n) for n in re.findall(r"^\| (\d+) \|", PAGE, re.M)}
    assert listed == set(range(1, 13))
    files = subprocess.run(["git", "ls-files", "*.py", "*.md"], cwd=ROOT, capture_output=True, text=True).stdout
    cited: set[int] = set()
    for name in files.split():
        text = (ROOT / name).read_text(errors="replace")
        for group in re.findall(r"[Ii]nvariants? (\d+(?:(?:, | and )\d+)*)", text):
            cited.update(int(n) for n in re.findall(r"\d+", group))
    assert cited and cited <= listed, sorted(cited - listed)


def test_nothing_in_the_repo_cites_a_design_or_an_issue_outside_it():
    """Someone with a fresh clone cannot follow a pointer to a design
    document's section or to an issue tracker's number: the repo says what
    it means in its own words."""
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.html", "*.yaml", "*.toml", "Makefile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    outside = re.compile(r"\bDESIGN\b|§\s?\d|\bissues? #?\d+\b", re.IGNORECASE)
    found = [
        f"{name}:{n}: {line.strip()[:80]}"
        for name in files
        if name != "tests/devtools/test_invariants_doc.py"
        for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), start=1)
        if outside.search(line)
    ]
    assert not found, found
