"""CSV that a spreadsheet cannot run.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a
formula to Excel, LibreOffice and Google Sheets, and text in our exports comes
from the public (a form's `utm_campaign`, a typed name). Such a cell gets a
leading apostrophe, which every spreadsheet shows as text and none evaluates;
numbers (ints, Decimals) are written as they are, so a negative refund stays
a number.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, Protocol

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Writable(Protocol):
    def write(self, value: str, /) -> Any: ...


def csv_cell(value: Any) -> Any:
    if isinstance(value, int | float | Decimal) or value is None:
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_row(row: Iterable[Any]) -> list[Any]:
    return [csv_cell(value) for value in row]


class SafeCsvWriter:
    """`csv.writer` whose every text cell has been neutralized."""

    def __init__(self, out: _Writable) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow(csv_row(row))

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)
