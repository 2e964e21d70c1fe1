"""Shared helpers for the Thumbtack and Yelp tests: the real local server
standing in for both marketplaces' APIs (devtools/simulator/marketplace_api.py,
which the simulator serves too), reached through THUMBTACK_API_URL and
YELP_API_URL; nothing of ours is replaced."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devtools.simulator.marketplace_api import MarketplaceServer, marketplaces_running


@pytest.fixture
def marketplace(settings: Any) -> Iterator[MarketplaceServer]:
    settings.SEND_MODE = "live"
    with marketplaces_running(settings) as server:
        yield server
