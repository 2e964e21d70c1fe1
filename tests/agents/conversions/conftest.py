"""Conversion tests run against real local stand-ins: a gRPC Google Ads API
(tests/helpers/google_ads.py) and a Graph API (tests/helpers/graph.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.google_ads import GoogleAdsServer, google_ads_running
from tests.helpers.graph import GraphServer, graph_running


@pytest.fixture
def google_ads(settings: Any) -> Iterator[GoogleAdsServer]:
    with google_ads_running(settings) as server:
        yield server


@pytest.fixture
def graph(settings: Any) -> Iterator[GraphServer]:
    with graph_running(settings) as server:
        yield server


@pytest.fixture
def live(settings: Any, google_ads: GoogleAdsServer, graph: GraphServer) -> None:
    """Uploads really go out, to the stand-ins."""
    settings.CONVERSIONS_MODE = "live"
