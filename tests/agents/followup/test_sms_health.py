"""SMS health (agents/reporting/sms_health.py): the figures, the limits crossing and pausing exactly the
automation responsible, the pause holding its texts, and the page."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.followup.sequences.engine import enrollment_start, step_run
from agents.reporting.daily_brief import brief_build
from agents.reporting.sms_health import EXCEPTION_KIND, sms_health, sms_health_check, sms_health_sweep
from crm.models import Business, Contact, Enrollment, ExceptionItem, Lead, Message, Receipt, Role, Sequence, TeamMember
from crm.services.consent import consent_record
from crm.services.records import contact_create
from tests.factories import member_create
from tests.helpers.followup import LINE, NOON_NY

pytestmark = pytest.mark.django_db

NOW = NOON_NY
OTHER_LINE = "+13125550111"


class Shop:
    """Texts as dispatch leaves them, for people who are not the test's lead."""

    def __init__(self, business: Business, playbook: dict[str, Sequence]) -> None:
        self.business, self.playbook = business, playbook
        self.made = 0
        self.sent = 0

    def person(self) -> Contact:
        self.made += 1
        return contact_create(business=self.business, actor="t", phones=[f"+1312555{2000 + self.made:04d}"])

    def text(
        self,
        contact: Contact,
        *,
        at: datetime,
        status: str = Message.Status.DELIVERED,
        error: str = "",
        template: str = "",
        step: tuple[str, int] | None = None,
        automated: bool = True,
        number: str = LINE,
    ) -> Message:
        enrollment, key = None, None
        if step is not None:
            sequence = self.playbook[step[0]]
            enrollment = Enrollment.objects.filter(contact=contact, sequence=sequence).first()
            if enrollment is None:
                lead = Lead.objects.create(business=self.business, contact=contact)
                enrollment = Enrollment.objects.create(
                    business=self.business, lead=lead, contact=contact, sequence=sequence, status="completed"
                )
            key = f"seq:{enrollment.public_id}:{step[1] - 1}"
            template = template or str(sequence.steps[step[1] - 1]["template"])
        self.sent += 1
        return Message.objects.create(
            business=self.business,
            contact=contact,
            contact_point=contact.points.get(),
            direction="out",
            channel="sms",
            status=status,
            error_code=error,
            template_key=template,
            automated=automated,
            enrollment=enrollment,
            idempotency_key=key or f"test:{self.sent}",
            from_number=number,
            to=contact.points.get().value,
            body="…",
            created_at=at,
        )

    def stop(self, contact: Contact, *, at: datetime) -> None:
        consent_record(
            contact_point=contact.points.get(), channel="sms", granted=False, basis="keyword", actor="t", at=at
        )

    def reply(self, contact: Contact, *, at: datetime) -> None:
        Message.objects.create(
            business=self.business,
            contact=contact,
            contact_point=contact.points.get(),
            direction="in",
            channel="sms",
            status=Message.Status.RECEIVED,
            body="ok thanks",
            created_at=at,
        )


@pytest.fixture
def shop(business: Business, playbook: dict[str, Sequence], manager: TeamMember) -> Shop:
    return Shop(business, playbook)


def nudges(shop: Shop, count: int, *, stops: int, at: datetime = NOW - timedelta(days=2)) -> list[Contact]:
    people = [shop.person() for _ in range(count)]
    for i, person in enumerate(people):
        shop.text(person, at=at + timedelta(minutes=i), step=("no_reply", 1))
        if i < stops:
            shop.stop(person, at=at + timedelta(minutes=i, seconds=30))
    return people


def test_the_figures_by_number_template_and_step(shop: Shop) -> None:
    a, b, c, d = (shop.person() for _ in range(4))
    shop.text(a, at=NOW - timedelta(days=1), step=("no_reply", 1))
    shop.text(b, at=NOW - timedelta(days=1), step=("no_reply", 1), status="undelivered", error="30007")
    shop.text(c, at=NOW - timedelta(days=1), template="ack_sms", status="failed", error="30006")
    shop.text(d, at=NOW - timedelta(days=1), template="", automated=False, number=OTHER_LINE, status="sent")
    shop.text(d, at=NOW - timedelta(days=9))  # before the window: not counted
    shop.stop(a, at=NOW - timedelta(hours=20))  # after a's nudge: blamed on it
    shop.stop(d, at=NOW - timedelta(hours=20))  # after a person's text only: counted, blamed on no automation
    shop.reply(b, at=NOW - timedelta(hours=22))

    health = sms_health(shop.business, until=NOW)

    total = health.total
    assert (total.sent, total.delivered, total.final, total.opt_outs) == (4, 1, 3, 2)
    assert total.delivery_rate == pytest.approx(1 / 3) and total.opt_outs_per_100 == 50
    assert total.error_groups() == [("30006", "landline", 1), ("30007", "filtered", 1)]
    assert {row.key: row.sent for row in health.numbers} == {LINE: 3, OTHER_LINE: 1}
    assert {row.key: (row.sent, row.opt_outs) for row in health.templates} == {"nudge_sms": (2, 1), "ack_sms": (1, 0)}
    assert {row.key: (row.sent, row.opt_outs) for row in health.steps} == {"no_reply step 1": (2, 1)}
    assert (health.texted, health.replied, health.reply_rate) == (4, 1, 0.25)


def test_a_step_past_the_opt_out_limit_pauses_its_sequence_and_tells_the_manager(shop: Shop) -> None:
    nudges(shop, 40, stops=2)  # 5 per 100, over the default 1
    estimate = shop.person()
    for i in range(30):  # another sequence's texts, healthy
        shop.text(estimate if i == 0 else shop.person(), at=NOW - timedelta(days=1), step=("open_estimate", 1))

    brakes = sms_health_check(shop.business, now=NOW)

    assert [(b.sequence, b.step, b.template, b.paused_now) for b in brakes] == [("no_reply", 1, "nudge_sms", True)]
    no_reply, open_estimate = (Sequence.objects.get(pk=shop.playbook[k].pk) for k in ("no_reply", "open_estimate"))
    assert no_reply.paused_at == NOW and "step 1 (nudge_sms): 5.0 opt-outs per 100 texts" in no_reply.paused_reason
    assert open_estimate.paused_at is None
    item = ExceptionItem.objects.get(kind=EXCEPTION_KIND)
    assert item.subject == no_reply.public_id and item.owner.user.username == "mia" and "nudge_sms" in item.detail
    assert Receipt.objects.filter(action="sequence.paused", subject=no_reply.public_id).count() == 1

    again = sms_health_check(shop.business, now=NOW + timedelta(hours=1))  # the next hourly run
    assert [b.paused_now for b in again] == [False]
    assert ExceptionItem.objects.filter(kind=EXCEPTION_KIND).count() == 1


def test_carrier_filtering_past_its_limit_pauses_too(shop: Shop) -> None:
    for i in range(25):
        filtered: dict[str, Any] = {"status": "undelivered", "error": "30007"} if i == 0 else {}
        shop.text(shop.person(), at=NOW - timedelta(days=1), step=("no_show", 1), **filtered)

    brakes = sms_health_check(shop.business, now=NOW)

    assert [(b.sequence, b.template) for b in brakes] == [("no_show", "no_show_sms")]
    reason = Sequence.objects.get(key="no_show", business=shop.business).paused_reason
    assert "4.0% filtered by carriers (limit 2%)" in reason


def test_too_few_texts_are_not_judged(shop: Shop) -> None:
    nudges(shop, 10, stops=3)  # 30 per 100, but ten texts say little
    assert sms_health_check(shop.business, now=NOW) == []
    shop.business.sms_health = {"min_sends": 10}
    shop.business.save()
    assert [b.sequence for b in sms_health_check(shop.business, now=NOW)] == ["no_reply"]


def test_a_template_no_sequence_sends_is_told_not_paused(shop: Shop) -> None:
    people = [shop.person() for _ in range(30)]
    for i, person in enumerate(people):
        shop.text(person, at=NOW - timedelta(days=1), template="ack_sms")
        if i < 3:
            shop.stop(person, at=NOW - timedelta(hours=20))

    assert sms_health_check(shop.business, now=NOW) == []

    assert not Sequence.objects.filter(paused_at__isnull=False).exists()
    item = ExceptionItem.objects.get(kind=EXCEPTION_KIND)
    assert item.subject == "template:ack_sms" and "10.0 opt-outs per 100" in item.detail


def test_a_paused_sequence_holds_its_texts_until_it_is_resumed(
    shop: Shop, lead: Lead, owner: TeamMember, client: Client
) -> None:
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOW)
    nudges(shop, 40, stops=2, at=NOW - timedelta(days=3))
    sms_health_check(shop.business, now=NOW)
    assert enrollment is not None and enrollment.next_step_due_at is not None
    due = enrollment.next_step_due_at

    assert step_run(enrollment.pk, 0, now=due) == "held: sequence paused"

    assert not lead.messages.filter(direction="out", enrollment=enrollment).exists()
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.next_step_index) == ("active", 0)
    assert Receipt.objects.filter(subject=enrollment.public_id, action="enrollment.step_held").exists()

    mia = TeamMember.objects.get(user__username="mia")
    client.force_login(mia.user)
    no_reply = Sequence.objects.get(key="no_reply", business=shop.business)
    assert client.post(f"/admin/sequences/{no_reply.public_id}/resume/").status_code == 302
    assert not ExceptionItem.objects.filter(kind=EXCEPTION_KIND, status="open").exists()

    assert enrollment.next_step_due_at == due + timedelta(hours=1)  # looked at again in an hour
    outcome = step_run(enrollment.pk, 0, now=enrollment.next_step_due_at)
    assert outcome != "held: sequence paused"
    assert lead.messages.filter(direction="out", enrollment=enrollment, template_key="nudge_sms").exists()


def test_the_owners_brief_says_what_is_paused_and_a_setter_s_does_not(shop: Shop, owner: TeamMember) -> None:
    nudges(shop, 40, stops=2)
    sms_health_check(shop.business, now=NOW)
    boss = member_create(shop.business, Role.OWNER, username="olivia")

    items = [i for i in brief_build(boss, now=NOW).items if i.kind == "paused"]
    assert len(items) == 1 and "no_reply" in items[0].title and "nudge_sms" in items[0].title
    assert not [i for i in brief_build(owner, now=NOW).items if i.kind == "paused"]


def test_the_page_shows_the_figures_to_leaders_and_resume_is_theirs_alone(
    shop: Shop, owner: TeamMember, client: Client
) -> None:
    nudges(shop, 40, stops=2, at=timezone.now() - timedelta(days=1))
    sms_health_sweep(now=timezone.now())
    no_reply = Sequence.objects.get(key="no_reply", business=shop.business)

    client.force_login(TeamMember.objects.get(user__username="mia").user)
    page = client.get("/admin/reports/sms-health/").content.decode()
    sent = page.split('data-key="sent"')[1].split("</div>")[0]
    assert '<dd class="headline-value">40</dd>' in sent and "+40 vs the 7 days before" in sent
    assert "no_reply step 1" in page and "Resume" in page
    assert 'id="health-chart"' in page  # the steps' opt-outs, drawn

    client.force_login(owner.user)  # a setter
    assert client.get("/admin/reports/sms-health/").status_code == 403
    assert client.post(f"/admin/sequences/{no_reply.public_id}/resume/").status_code == 403
    assert Sequence.objects.get(pk=no_reply.pk).paused_at is not None


def test_the_business_file_sets_the_limits(business: Business, tmp_path: Any) -> None:
    from crm.services.business_file import BusinessFileError, business_file_load

    path = tmp_path / "shop.yaml"
    head = "business:\n  slug: shop\n  name: Shop\n  timezone: America/Chicago\npolicy:\n  sms_health:\n"
    path.write_text(head + "    opt_outs_per_100: 0.5\n    min_sends: 50\n")
    loaded = business_file_load(path).business
    assert loaded.sms_health == {"opt_outs_per_100": 0.5, "min_sends": 50.0}
    path.write_text(head + "    filtered_percent: -1\n")
    with pytest.raises(BusinessFileError, match="filtered_percent must be a number above 0"):
        business_file_load(path)
