"""An import-linter contract that the installed import-linter lacks: no import
cycle among the modules of the given packages, imports inside functions
included (grimp reads every import statement, wherever it stands).

A cycle is what makes "import this inside the function, because that module
imports this one" necessary; with none, every module can be read knowing
that what it imports was written without it.

    [[tool.importlinter.contracts]]
    name = "No import cycles"
    type = "acyclic"
    containers = ["crm", "agents"]
"""

from __future__ import annotations

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def import_cycles(graph: ImportGraph, modules: set[str]) -> list[list[str]]:
    """The strongly connected groups of more than one module among
    `modules` (Tarjan's algorithm, iterative: the graph is deep), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt) & modules))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


class AcyclicContract(Contract):
    """No module in `containers` takes part in an import cycle with another."""

    type_name = "acyclic"

    containers = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        modules: set[str] = set()
        for container in self.containers:  # type: ignore[attr-defined]
            modules |= {container, *graph.find_descendants(container)}
        cycles = import_cycles(graph, modules)
        details = []
        for group in cycles:
            members = set(group)
            # One import that closes the cycle, with its line, for a place to start.
            first = group[0]
            back = next((m for m in sorted(members) if first in graph.find_modules_directly_imported_by(m)), group[-1])
            lines = [d["line_number"] for d in graph.get_import_details(importer=back, imported=first)]
            details.append({"modules": group, "closing": f"{back} -> {first} (line {', '.join(map(str, lines))})"})
        return ContractCheck(kept=not cycles, metadata={"cycles": details})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"An import cycle of {len(cycle['modules'])} modules:")
            for module in cycle["modules"]:
                output.indent_cursor()
                output.print_error(f"- {module}")
            output.indent_cursor()
            output.print_error(f"closed by {cycle['closing']}")
            output.new_line()
