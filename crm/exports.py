"""Exports a spreadsheet cannot run: CSV and XLSX.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a
formula to Excel, LibreOffice and Google Sheets, and text in our exports comes
from the public (a form's `utm_campaign`, a typed name). Such a cell gets a
leading apostrophe, which every spreadsheet shows as text and none evaluates;
numbers (ints, Decimals) are written as they are, so a negative refund stays
a number.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from django.utils import timezone

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


# --- XLSX --------------------------------------------------------------------------------

XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# The money format of a currency Excel shows with its symbol; any other
# currency is shown with its code after the amount.
CURRENCY_SYMBOLS = {"USD": "$", "CAD": "CA$", "AUD": "A$", "NZD": "NZ$", "EUR": "€", "GBP": "£", "MXN": "MX$"}


def money_format(currency: str) -> str:
    symbol = CURRENCY_SYMBOLS.get(currency.upper())
    return f'"{symbol}"#,##0.00;-"{symbol}"#,##0.00' if symbol else f'#,##0.00 "{currency.upper()}"'


def xlsx_bytes(sheet: str, header: list[str], rows: Iterable[Iterable[Any]], *, money: str = "") -> bytes:
    """One sheet as an XLSX workbook: the header row in bold with the panes
    frozen under it; ints and Decimals as numbers (in the `money` currency's
    format when `money` is set and the column's header ends in "amount" or is
    in MONEY_HEADERS), datetimes as dates in the current time zone (a
    spreadsheet holds no zone), text as text. No text is ever a formula or a
    link: XlsxWriter writes it as a string whatever it starts with."""
    import xlsxwriter  # only an export needs it

    out = io.BytesIO()
    # constant_memory: each row goes to a temporary file as it is written
    # (rows in order), so a 90,000-row export never holds them all.
    book = xlsxwriter.Workbook(
        out,
        {"constant_memory": True, "strings_to_formulas": False, "strings_to_urls": False, "strings_to_numbers": False},
    )
    bold = book.add_format({"bold": True, "bottom": 1})
    money_cell = book.add_format({"num_format": money_format(money)}) if money else None
    when = book.add_format({"num_format": "yyyy-mm-dd hh:mm"})
    page = book.add_worksheet(sheet[:31])
    for c, title in enumerate(header):
        page.set_column(c, c, max(len(title), 12) + 2)
    page.freeze_panes(1, 0)
    page.write_row(0, 0, header, bold)
    money_columns = {i for i, title in enumerate(header) if money_cell is not None and _is_money(title)}
    for r, row in enumerate(rows, start=1):
        for c, value in enumerate(row):
            if isinstance(value, bool) or value is None:
                page.write_string(r, c, "" if value is None else str(value))
            elif isinstance(value, int | float | Decimal):
                page.write_number(r, c, float(value), money_cell if c in money_columns else None)
            elif isinstance(value, datetime):
                local = timezone.localtime(value) if timezone.is_aware(value) else value
                page.write_datetime(r, c, local.replace(tzinfo=None), when)
            else:
                page.write_string(r, c, str(value))
    book.close()
    return out.getvalue()


# Money columns by their header (as the reports name them).
MONEY_HEADERS = frozenset({"invoiced", "collected", "refunded", "net"})


def _is_money(title: str) -> bool:
    return title in MONEY_HEADERS or title.endswith(("amount", "_by_click"))
