"""The right to text, in a real browser, on the demo shop: the manager's SMS
health page (a week of texts, the paused sequence, Resume) and the 10DLC
evidence pack's pre-flight, at desktop and phone width."""

from __future__ import annotations

import pytest

from crm.models import Sequence
from devtools.demo import DEMO_SLUG, demo_load, demo_password

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", demo_password(username))
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def test_the_manager_reads_the_week_s_sms_health_and_resumes_the_paused_sequence(
    live_server, browser_context, shots
) -> None:
    demo_load()
    page = browser_context.new_page()
    log_in(page, live_server.url, "mia")

    page.goto(f"{live_server.url}/admin/reports/sms-health/")

    sent = page.locator('#health-figures [data-key="sent"] .headline-value').inner_text()
    assert int(sent.replace(",", "")) > 100
    assert page.locator('#health-figures [data-key="delivery"] .headline-value').inner_text().endswith("%")
    assert "pts vs the 7 days before" in page.locator('#health-figures [data-key="delivery"]').inner_text()
    errors = page.locator("#health-numbers").inner_text()
    assert "filtered (30007)" in errors and "unreachable (30003)" in errors
    paused = page.locator("#health-paused tbody tr")
    assert paused.count() == 1 and "no_reply" in paused.inner_text() and "nudge_sms" in paused.inner_text()
    page.screenshot(path=str(shots / "sms-health.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(shots / "sms-health-phone.png"), full_page=True)
    # Nothing wider than the phone: the tables scroll inside the page, not the page itself.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1

    page.set_viewport_size({"width": 1280, "height": 900})
    paused.locator("button", has_text="Resume").click()
    page.wait_for_selector(".messagelist")
    assert page.locator("#health-paused").count() == 0
    assert Sequence.objects.get(business__slug=DEMO_SLUG, key="no_reply").paused_at is None


def test_the_owner_reads_the_evidence_pack_s_preflight(live_server, browser_context, shots) -> None:
    demo_load()
    page = browser_context.new_page()
    log_in(page, live_server.url, "olivia")

    page.goto(f"{live_server.url}/admin/compliance/evidence/")

    finding = page.locator("#preflight tbody tr")
    assert finding.count() == 1 and "no_show_sms" in finding.inner_text()
    assert "Acme Heating & Air LLC" in page.locator("#evidence-business").inner_text()
    assert page.locator("#evidence-samples tbody tr").count() >= 5
    page.screenshot(path=str(shots / "evidence-pack.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(shots / "evidence-pack-phone.png"), full_page=True)
