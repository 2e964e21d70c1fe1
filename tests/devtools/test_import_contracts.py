"""The acyclic import contract: it finds a cycle closed by an import inside a
function, and the project's own modules have none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

from devtools.import_contracts import import_cycles

ROOT = Path(__file__).resolve().parents[2]


def package_write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_closed_inside_a_function_is_found(tmp_path: Path, monkeypatch) -> None:
    package_write(
        tmp_path,
        {
            "looped/__init__.py": "",
            "looped/steps.py": "from looped.events import record\n",
            "looped/events.py": "def record():\n    from looped import orchestrator\n",
            "looped/orchestrator.py": "from looped import steps\n",
            "looped/leaf.py": "from looped import events\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    graph = grimp.build_graph("looped", cache_dir=None)

    assert import_cycles(graph, graph.modules) == [["looped.events", "looped.orchestrator", "looped.steps"]]


def test_a_graph_without_cycles_has_none(tmp_path: Path, monkeypatch) -> None:
    package_write(
        tmp_path,
        {
            "tree/__init__.py": "",
            "tree/a.py": "from tree import b\n",
            "tree/b.py": "from tree import c\n",
            "tree/c.py": "",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    assert import_cycles(grimp.build_graph("tree", cache_dir=None), {"tree.a", "tree.b", "tree.c"}) == []


def test_the_projects_contracts_hold_and_name_the_cycle_contract() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )

    assert result.returncode == 0, result.stdout[-3000:]
    assert "No import cycles among the project's modules" in result.stdout
    assert "The product never imports its tooling" in result.stdout
