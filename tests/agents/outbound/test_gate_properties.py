"""Property-based: whatever mix of inbound texts, clock moves, sends and task
redeliveries happens, the gate's promises hold:

- no text to a revoked channel is handed to the provider;
- none is handed over inside quiet hours (the recipient's local time);
- no automated text goes out while another automated path is active;
- never two provider calls for one intended message.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agents.outbound.dispatch import message_dispatch
from agents.outbound.gate import message_gate, message_send
from agents.outbound.keyword_replies import inbound_text_apply
from crm.models import ConsentState, Enrollment, Message, Sequence
from crm.services.consent import consent_record
from tests.agents.outbound.fake_twilio import ScriptedTwilio, created
from tests.factories import lead_create

NEW_YORK = ZoneInfo("America/New_York")
START = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)  # 08:00 in New York
_people = itertools.count(100)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 5), st.booleans()),  # intended message n, automated?
        st.tuples(st.just("redeliver"), st.integers(0, 5), st.booleans()),  # its task runs again
        st.tuples(st.just("clock"), st.integers(1, 600), st.booleans()),  # minutes pass
        st.tuples(st.just("inbound"), st.sampled_from(["STOP", "START", "Tuesday works", "stop"]), st.booleans()),
        st.tuples(st.just("path"), st.sampled_from(["enroll", "stop"]), st.booleans()),
    ),
    max_size=25,
)


@pytest.mark.django_db
@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_the_gate_keeps_its_promises_under_any_sequence(business, settings, ops):
    settings.SEND_MODE = "live"
    settings.TWILIO_MESSAGING_SERVICE_SID = "MG" + "0" * 32
    person = next(_people)
    lead = lead_create(business, phone=f"+1212555{person:04d}")
    point = lead.contact.points.get()
    consent_record(contact_point=point, channel="sms", granted=True, basis="form_disclosure", actor="t")
    sequence, _ = Sequence.objects.get_or_create(business=business, key="path", defaults={"trigger": "no_reply"})
    now = START
    sids = (f"SM{person:08d}{n:024d}" for n in itertools.count())
    twilio = ScriptedTwilio([])
    handed_over: list[tuple[Message, datetime, str, bool]] = []

    def dispatch(message: Message) -> None:
        if message.status != "queued":
            return
        state = ConsentState.objects.get(contact_point=point, channel="sms").status
        other_path = Enrollment.objects.filter(contact=lead.contact, status="active").exists()
        calls = len(twilio.requests)
        twilio.answers.append(created(next(sids)))
        message_dispatch(message.pk, http_client=twilio)
        if len(twilio.requests) > calls:
            handed_over.append((message, now, state, other_path))
        else:
            twilio.answers.pop()

    for op, arg, flag in ops:
        if op == "send":
            key = f"{person}:m{arg}"
            dispatch(
                message_send(
                    lead=lead, channel="sms", body=f"m{arg}", actor="t", idempotency_key=key, automated=flag, now=now
                )
            )
        elif op == "redeliver":
            message = Message.objects.filter(idempotency_key=f"{person}:m{arg}").first()
            if message is not None:
                message_gate(message, now=now)
                dispatch(Message.objects.get(pk=message.pk))
        elif op == "clock":
            now += timedelta(minutes=arg)
            for deferred in Message.objects.filter(lead=lead, status="deferred", deferred_until__lte=now):
                dispatch(message_gate(deferred, now=now))
        elif op == "inbound":
            text = Message.objects.create(
                business=business,
                lead=lead,
                contact=lead.contact,
                contact_point=point,
                direction="in",
                channel="sms",
                status="received",
                body=arg,
                created_at=now,
            )
            inbound_text_apply(message=text, lead=lead, opt_out_type="STOP" if flag and arg == "STOP" else "")
            for reply in Message.objects.filter(idempotency_key=f"keyword-reply:{text.public_id}"):
                dispatch(reply)
        elif op == "path" and arg == "enroll":
            Enrollment.objects.get_or_create(
                business=business, lead=lead, contact=lead.contact, sequence=sequence, status="active"
            )
        elif op == "path":
            Enrollment.objects.filter(contact=lead.contact, status="active").update(status="stopped")

    keys = [m.idempotency_key for m, _, _, _ in handed_over]
    assert len(keys) == len(set(keys)), "two provider calls for one intended message"
    assert len(twilio.requests) == len(handed_over)
    for message, when, consent, other_path in handed_over:
        if str(message.idempotency_key).startswith("keyword-reply:"):
            continue  # a STOP/START/HELP confirmation is owed whatever the state
        assert consent != "revoked", f"{message.body} went to a revoked channel"
        local = when.astimezone(NEW_YORK).time()
        assert business.quiet_hours_start <= local < business.quiet_hours_end, f"{message.body} went out at {local}"
        assert not (message.automated and other_path), f"{message.body} went out beside another automated path"
