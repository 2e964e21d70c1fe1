"""One registry mechanism for the whole project: a name -> thing table that
an app fills once, from its `AppConfig.ready()`, and everything else reads.

The lower apps own the tables (crm's timers and erasers, approvals' decision
handlers, the capture handlers) and never import the apps that fill them;
the apps above register what they add. A name registered twice is a mistake
— two modules claiming one timer kind, or a module imported under two
names — and is refused at startup instead of one silently winning.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured

V = TypeVar("V")


class Registry(Generic[V]):
    """`what` names the things, for errors: "timer handler", "approval handler"."""

    every: ClassVar[list[Registry[Any]]] = []

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, V] = {}
        Registry.every.append(self)

    def register(self, name: str, value: V) -> V:
        if name in self._items:
            raise ImproperlyConfigured(f"a {self.what} for {name!r} is registered already")
        self._items[name] = value
        return value

    def get(self, name: str) -> V | None:
        return self._items.get(name)

    def __getitem__(self, name: str) -> V:
        try:
            return self._items[name]
        except KeyError:
            raise LookupError(f"no {self.what} registered for {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[str, V]]:
        return list(self._items.items())

    def values(self) -> list[V]:
        return list(self._items.values())

    @contextmanager
    def registered(self, name: str, value: V) -> Iterator[V]:
        """`value` under `name` for the block only (a test's own handler)."""
        self.register(name, value)
        try:
            yield value
        finally:
            del self._items[name]

    @contextmanager
    def replaced(self, items: dict[str, V] | None = None) -> Iterator[None]:
        """Exactly `items` (none by default) for the block, then the table as it
        was: for a test of one part alone."""
        saved = dict(self._items)
        self._items = dict(items or {})
        try:
            yield
        finally:
            self._items = saved

    @classmethod
    @contextmanager
    def all_restored(cls) -> Iterator[None]:
        """Every registry as it is now, again after the block, whatever the
        block registered: around each test."""
        saved = [(registry, dict(registry._items)) for registry in cls.every]
        try:
            yield
        finally:
            for registry, items in saved:
                registry._items = items
