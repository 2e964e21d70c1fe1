"""The owner's and the manager's pages on the demo shop, in a real browser:
the brief opens with yesterday's headline numbers, the exception report says
what each item is, whose it is and what to do next, and the reviews page
shows the requests' figures and the shop's Google reviews — at desktop and
phone width, with nothing wider than the phone."""

from __future__ import annotations

import re

import pytest

from agents.reporting.pipeline_qa import pipeline_qa_run
from devtools.demo import demo_load, demo_password

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", demo_password(username))
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def both_widths(page, shots, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(shots / f"{name}-phone.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1
    page.set_viewport_size(DESKTOP)


def test_the_owner_s_brief_opens_with_yesterday_s_numbers(live_server, browser_context, shots) -> None:
    demo_load()
    page = browser_context.new_page()
    log_in(page, live_server.url, "olivia")

    page.goto(f"{live_server.url}/admin/reports/brief/")

    cards = page.locator(".headlines .headline")
    assert cards.count() == 4
    labels = [cards.nth(n).locator("dt").inner_text() for n in range(4)]
    assert [label.split("\n")[0].replace(" yesterday", "") for label in labels] == [
        "New leads",
        "Booked",
        "Won",
        "Collected",
    ]
    # Net of refunds: a day with more refunded than collected reads "-$150".
    assert re.fullmatch(r"-?\$[\d,]+", page.locator(".headline[data-key=net] .headline-value").inner_text())
    assert " vs last " in page.locator(".headline[data-key=leads] .headline-change").inner_text()
    both_widths(page, shots, "brief")


def test_the_manager_s_exception_report_says_who_and_what_to_do(live_server, browser_context, shots) -> None:
    demo_load()
    pipeline_qa_run()  # what the cluster's Pipeline QA finds every 15 minutes
    page = browser_context.new_page()
    log_in(page, live_server.url, "mia")

    page.goto(f"{live_server.url}/admin/reports/exceptions/")

    rows = page.locator("#exception-items tbody tr")
    assert rows.count() > 0
    for n in range(rows.count()):
        cells = rows.nth(n).locator("td")
        what, next_step = cells.nth(0).inner_text(), cells.nth(3).inner_text()
        assert "_" not in what and next_step.endswith(".")
    thread = page.locator("#exception-items tbody a[href^='/app/leads/']").first
    thread.click()
    page.wait_for_url(re.compile(r"/app/leads/lead_"))
    page.go_back()
    both_widths(page, shots, "exceptions")


def test_the_owner_reads_the_review_figures_and_the_shop_s_google_reviews(live_server, browser_context, shots) -> None:
    demo_load()
    page = browser_context.new_page()
    log_in(page, live_server.url, "olivia")

    page.goto(f"{live_server.url}/admin/reviews/")

    def headline(key: str) -> str:
        return page.inner_text(f'#review-figures [data-key="{key}"] .headline-value')

    assert (headline("sent"), headline("clicked_requests")) == ("1", "1")
    assert (headline("reviews"), headline("reviews_matched")) == ("3", "1")
    # The stars chart's text alternative: one 5-star, one 4-star, one 2-star review.
    assert page.locator("#stars-chart-data tbody tr").count() == 5
    listed = page.locator("#review-list tbody tr")
    assert listed.count() == 3
    assert "not matched" in page.locator("#review-list tbody tr", has_text="Dana Kowalski").inner_text()
    both_widths(page, shots, "reviews")


def test_an_agency_reads_its_portfolio(live_server, browser_context, shots) -> None:
    from crm.models import Role, TeamMember
    from tests.factories import BusinessFactory

    demo_load()
    # Mia also manages a second shop for the agency.
    second = BusinessFactory.create(slug="lakeside-plumbing", name="Lakeside Plumbing", timezone="America/Chicago")
    mia = TeamMember.objects.get(user__username="mia", business__slug="acme-hvac")
    TeamMember.objects.create(business=second, user=mia.user, role=Role.MANAGER, display_name="Mia")
    page = browser_context.new_page()
    log_in(page, live_server.url, "mia")

    page.goto(f"{live_server.url}/admin/reports/portfolio/")

    rows = page.locator("#portfolio-table tbody tr")
    assert rows.count() == 2
    acme = page.locator("#portfolio-table tbody tr", has_text="Acme Heating & Air")
    assert re.fullmatch(r"\$[\d,.]+", acme.locator("td[data-key=spend]").inner_text())
    assert acme.locator("td[data-key=roas]").inner_text().endswith("×")
    lakeside = page.locator("#portfolio-table tbody tr", has_text="Lakeside Plumbing")
    assert lakeside.locator("td[data-key=spend]").inner_text() == "no spend data"
    both_widths(page, shots, "portfolio")


def test_the_owner_reads_revenue_in_eight_columns_of_money_with_the_rest_one_click_away(
    live_server, browser_context, shots
) -> None:
    demo_load()
    page = browser_context.new_page()
    log_in(page, live_server.url, "olivia")

    page.goto(f"{live_server.url}/admin/revenue/?business=acme-hvac&by=campaign")

    assert page.locator("#revenue-headlines .headline").count() == 4
    assert page.locator(".report-chart svg[role=img]").count() == 1
    # Their words, not as the admin's style capitalises them.
    headers = [text.strip() for text in page.locator("#revenue-summary thead th").all_text_contents()]
    assert headers == ["Campaign", "Leads", "Contacted", "Booked", "Won", "Collected", "Net", "Net by click"]
    # Campaigns by their names (the ids stay in the full table and the exports).
    assert "Fall tune-up" in page.locator("#revenue-summary tbody").inner_text()
    # Money as people read it, in the business's currency.
    assert re.fullmatch(r"-?\$[\d,]+\.\d\d", page.locator("#revenue-summary tfoot td").nth(5).inner_text())
    # The seventeen columns are there, folded until asked for.
    assert not page.locator("#revenue-table").is_visible()
    page.click("#revenue-all-columns summary")
    assert page.locator("#revenue-table").is_visible()
    assert page.locator("#revenue-table thead th").count() == 17
    page.click("#revenue-all-columns summary")
    both_widths(page, shots, "revenue")
