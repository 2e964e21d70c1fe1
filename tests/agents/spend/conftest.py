"""Spend pulls run against the real local stand-ins the conversion uploads
use: a gRPC Google Ads API (tests/helpers/google_ads.py, whose search also
answers campaign reports: devtools/simulator/lsa.py) and a Graph API
(tests/helpers/graph.py, whose insights page with `paging.next`)."""

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
