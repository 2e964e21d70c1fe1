"""Reading a business file: the YAML with the line of every key and list
item remembered, and `Map`, which turns one mapping's raw values into checked
ones (text, slugs, numbers, choices, phones, time zones, time ranges) and
names the line of any it refuses. Nothing here knows the file's sections.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug

from crm.localtime import clock_time
from crm.phones import phone_to_e164
from crm.validation import time_range_refusal


class BusinessFileError(Exception):
    """The file cannot be loaded; `line` is where (1-based), `reason` why."""

    def __init__(self, line: int | None, reason: str, path: str = "") -> None:
        super().__init__(line, reason)
        self.line, self.reason, self.path = line, reason, path

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{self.path}: {where}{self.reason}" if self.path else f"{where}{self.reason}"


# --- YAML with line numbers -------------------------------------------------


class LineDict(dict[str, Any]):
    """A mapping from the file that remembers its own line and each key's."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.lines: dict[str, int] = {}


class LineList(list[Any]):
    """A list from the file that remembers its own line and each item's."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.lines: list[int] = []


# A business file is a few kilobytes; ten times the largest we have seen is
# still small. A bigger one is refused before YAML reads a byte of it.
MAX_FILE_BYTES = 512 * 1024


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings and lists are LineDict and LineList, and
    which refuses anchors' aliases: a business file repeats nothing by
    reference, and a chain of aliases ("a billion laughs") turns a file of
    two kilobytes into gigabytes of objects before any check could run."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise BusinessFileError(
                event.start_mark.line + 1, f"aliases (*{event.anchor}) are not allowed: write the values out"
            )
        return super().compose_node(parent, index)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    data = LineDict(node.start_mark.line + 1)
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        key = loader.construct_object(key_node, deep=True)
        # YAML 1.1 reads bare `on`, `yes`, `1` as booleans and numbers.
        if not isinstance(key, str):
            raise BusinessFileError(line, f"key {key!r} must be text (quote it)")
        if key in data:
            raise BusinessFileError(line, f"duplicate key {key!r} (first at line {data.lines[key]})")
        data[key] = loader.construct_object(value_node, deep=True)
        data.lines[key] = line
    return data


def _construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LineList:
    data = LineList(node.start_mark.line + 1)
    for child in node.value:
        data.append(loader.construct_object(child, deep=True))
        data.lines.append(child.start_mark.line + 1)
    return data


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


def yaml_load_with_lines(text: str) -> Any:
    """Parse YAML safely; mappings and lists come back as LineDict/LineList.
    Refuses a file over MAX_FILE_BYTES and any alias (`_LineLoader`)."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise BusinessFileError(None, f"the file is larger than {MAX_FILE_BYTES // 1024} KB")
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise BusinessFileError(mark.line + 1 if mark else None, f"not valid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise BusinessFileError(None, f"not valid YAML: {exc}") from exc


def plain(value: Any) -> Any:
    """The same data as built-in dicts and lists, as a JSONField stores it."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# --- typed reading of one mapping ----------------------------------------------

MISSING = object()


def kind_of(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, date):
        return "a date"
    return type(value).__name__


@dataclass(frozen=True)
class Ref:
    """A name the file refers to, and where."""

    name: str
    line: int


class Map:
    """One mapping of the file with typed getters whose errors name the line.

    A key given as empty (`subject:`) counts as left out.
    """

    def __init__(
        self,
        value: Any,
        line: int,
        what: str,
        *,
        required: tuple[str, ...] = (),
        optional: tuple[str, ...] = (),
        any_other: bool = False,
    ) -> None:
        if not isinstance(value, LineDict):
            raise BusinessFileError(line, f"{what} must be a mapping, not {kind_of(value)}")
        self.data, self.what, self.line = value, what, value.line
        allowed = {*required, *optional}
        if not any_other:
            for key in value:
                if key not in allowed:
                    raise BusinessFileError(value.lines[key], f"unknown key {key!r} in {what}")
        for key in required:
            if value.get(key) is None:
                raise BusinessFileError(self.line_of(key), f"missing key {key!r} in {what}")

    def line_of(self, key: str) -> int:
        return self.data.lines.get(key, self.data.line)

    def error(self, key: str, reason: str) -> BusinessFileError:
        return BusinessFileError(self.line_of(key), reason)

    def raw(self, key: str) -> Any:
        value = self.data.get(key)
        return MISSING if value is None else value

    def has(self, key: str) -> bool:
        return self.raw(key) is not MISSING

    def text(self, key: str, default: str = "") -> str:
        value = self.raw(key)
        if value is MISSING:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"{key!r} in {self.what} must be text, not {kind_of(value)}")
        value = value.strip()
        if not value:
            raise self.error(key, f"{key!r} in {self.what} is empty")
        return value

    def slug(self, key: str) -> str:
        value = self.text(key)
        try:
            validate_slug(value)
        except ValidationError as exc:
            raise self.error(
                key, f"{key!r} in {self.what} must be a slug (letters, digits, - and _): {value!r}"
            ) from exc
        return value

    def integer(self, key: str, default: int | None, *, minimum: int = 0) -> int | None:
        value = self.raw(key)
        if value is MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"{key!r} in {self.what} must be a whole number, not {kind_of(value)}")
        if value < minimum:
            raise self.error(key, f"{key!r} in {self.what} must be at least {minimum}, not {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is MISSING:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"{key!r} in {self.what} must be true or false, not {kind_of(value)}")
        return value

    def choice(self, key: str, choices: tuple[str, ...] | list[str], label: str) -> str:
        value = self.text(key)
        if value not in choices:
            raise self.error(key, f"bad {label} {value!r} in {self.what} (one of {', '.join(choices)})")
        return value

    def items(self, key: str, *, non_empty: bool = False) -> list[tuple[Any, int]]:
        """The list under `key` as (item, line) pairs."""
        value = self.raw(key)
        if value is MISSING:
            if non_empty:
                raise self.error(key, f"missing key {key!r} in {self.what}")
            return []
        if not isinstance(value, LineList):
            raise self.error(key, f"{key!r} in {self.what} must be a list, not {kind_of(value)}")
        if non_empty and not value:
            raise self.error(key, f"{key!r} in {self.what} is empty")
        return list(zip(value, value.lines, strict=True))

    def texts(self, key: str, *, non_empty: bool = False) -> list[Ref]:
        refs = []
        for item, line in self.items(key, non_empty=non_empty):
            if not isinstance(item, str) or not item.strip():
                hint = " (quote it)" if isinstance(item, int | float) else ""
                raise BusinessFileError(line, f"each of {key!r} in {self.what} must be text, not {kind_of(item)}{hint}")
            refs.append(Ref(item.strip(), line))
        return refs

    def zone(self, key: str) -> str:
        value = self.text(key)
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise self.error(
                key, f"bad time zone {value!r} in {self.what} (an IANA name like America/Chicago)"
            ) from exc
        return value

    def phone(self, key: str, region: str) -> str:
        value = self.raw(key)
        if isinstance(value, int) and not isinstance(value, bool):
            raise self.error(key, f"{key!r} in {self.what} must be text: quote the phone number")
        raw = self.text(key)
        e164 = phone_to_e164(raw, region)
        if e164 is None:
            raise self.error(key, f"bad phone {raw!r} in {self.what}: not a possible phone number")
        return e164

    def time_range(self, key: str, *, ordered: bool = True, to_midnight: bool = False) -> tuple[time, time]:
        what = f"{key!r} in {self.what}"
        return time_range(self.text(key), self.line_of(key), what, ordered=ordered, to_midnight=to_midnight)


def time_range(
    value: Any, line: int, what: str, *, ordered: bool = True, to_midnight: bool = False
) -> tuple[time, time]:
    """A checked "HH:MM-HH:MM". `to_midnight`: the range may end at "24:00"
    (a day's hours open until midnight; crm.localtime.END_OF_DAY)."""
    if refusal := time_range_refusal(value, ordered=ordered, to_midnight=to_midnight):
        raise BusinessFileError(line, f"{what} {refusal}")
    start, end = value.split("-")
    return clock_time(start), time.max if end == "24:00" else clock_time(end)


@dataclass
class ItemMap:
    """A list item before its own keys are known to the section parser."""

    value: Any
    line: int
    what: str

    def read(self, **kwargs: Any) -> Map:
        return Map(self.value, self.line, self.what, **kwargs)
