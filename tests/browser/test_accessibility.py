"""axe-core (the npm package's axe.min.js, shipped inside the
axe-playwright-python wheel and injected into the page: nothing is fetched)
on the pages people use all day: no critical and no serious violation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe

from crm.models import Business, Role, TeamMember
from tests.browser.test_workspace import _living_business, business, log_in, sam  # noqa: F401 - fixtures
from tests.factories import member_create

pytestmark = pytest.mark.django_db(transaction=True)

BLOCKING = ("critical", "serious")


def _violations(page: Any) -> tuple[Counter[str], list[str]]:
    found = Axe().run(page).response["violations"]
    counts = Counter(v["impact"] for v in found)
    named = [f"{v['impact']}: {v['id']} ({len(v['nodes'])}) {v['nodes'][0]['target']}" for v in found]
    return counts, named


def test_the_pages_people_use_have_no_critical_or_serious_violation(
    live_server,
    browser_context,
    business: Business,  # noqa: F811 - the fixture imported above
    sam: TeamMember,  # noqa: F811
) -> None:
    lead = _living_business(business, sam)["rosa"]
    member_create(business, Role.MANAGER, username="mia")
    pages = {
        "inbox": ("sam", "/app/inbox/"),
        "thread": ("sam", f"/app/leads/{lead.public_id}/"),
        "approvals": ("mia", "/app/approvals/"),
        "daily brief": ("mia", "/admin/reports/brief/"),
        "admin lead page": ("mia", f"/admin/crm/lead/{lead.pk}/change/"),
        # Headlines, a chart and its hidden text table; a manager reads money there.
        "funnel": ("mia", "/admin/reports/funnel/"),
        "revenue": ("mia", "/admin/revenue/"),
        "admin index": ("mia", "/admin/"),
        "exception report": ("mia", "/admin/reports/exceptions/"),
        "leak audit": ("mia", "/admin/reports/leaks/"),
        "portfolio": ("mia", "/admin/reports/portfolio/"),
        "sms health": ("mia", "/admin/reports/sms-health/"),
        "reviews": ("mia", "/admin/reviews/"),
    }
    report = {}
    for name, (username, path) in pages.items():
        page = log_in(browser_context, live_server, username, path=path)
        page.wait_for_load_state("networkidle")
        report[name] = _violations(page)
        page.close()
        browser_context.clear_cookies()
    print("\naxe-core per page:", {name: dict(counts) for name, (counts, _named) in report.items()})
    for name, (_counts, named) in report.items():
        for line in named:
            print(f"  {name}: {line}")
    blocking = {name: [n for n in named if n.split(":")[0] in BLOCKING] for name, (_c, named) in report.items()}
    assert not any(blocking.values()), blocking
