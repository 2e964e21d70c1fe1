"""Forgetting a person: `contact_forget` erases one contact's personal data.

What goes, and what stays:

- Gone: the contact's names, address, postal code and notes; the values of
  their contact points (replaced by `erased:<point id>`, which is unique per
  point, so the unique constraints hold, identifies nobody, and is marked
  invalid, so identity matching and sending never use it again); message
  bodies, subjects and the person's numbers on messages and calls; call
  transcripts, recording URLs and the transcript excerpts in call flags; the
  raw bodies and headers of every inbound event that concerns them (linked
  from their records, or carrying their phone, email or a message/call id);
  consent evidence (IP, user agent, the text shown), replaced by an erasure
  marker, the ledger's one permitted change; the lead's request text, facts
  and fit reasons; form answers; click ids (gclid, fbclid: an ad platform can
  tie them back to the person, so they go; campaign, ad group, ad, form and
  UTM tags stay for attribution) and the landing page's query string;
  appointment locations, notes and technician briefs; the name and text of
  the reviews matched to them (the rating stays); the personal-data rows
  of every receipt about them (the receipts stay and still verify).
- Redacted (their name, numbers and emails replaced by "[erased]", the rest
  kept because it carries the business's meaning): task titles and outcomes,
  the lead's next action, hold, lost and routing reasons, estimate
  descriptions, refund reasons, exception details, timer payloads, admin log
  entries, and, through the registry below, other apps' records (approvals).
- Kept: every record, its stage, status, times and money (totals unchanged),
  the consent states (so a STOP still holds), and the ids that link them.

Automation stays paused for the contact afterwards. One transaction; the
receipt it writes (`contact.forgotten`) counts what was erased per table and
says why, with the person's values redacted from that reason too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import phonenumbers
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.db.models import Q

from crm.db_triggers import EVIDENCE_ERASED
from crm.models import (
    Appointment,
    Call,
    ConsentEvent,
    Contact,
    ContactPoint,
    ContactPointKind,
    Enrollment,
    Estimate,
    ExceptionItem,
    InboundEvent,
    Invoice,
    Job,
    Lead,
    LeadTouch,
    Message,
    ModelCall,
    Note,
    Payment,
    Receipt,
    Refund,
    Review,
    ReviewRequest,
    Task,
    Timer,
)
from crm.models.receipts import ERASED, PERSONAL_KEYS
from crm.registry import Registry
from crm.services.merge import contact_root
from crm.services.receipts import receipt_personal_data_erase, receipt_write

ACTION = "contact.forgotten"
_EVIDENCE_ERASED = json.loads(EVIDENCE_ERASED)


@dataclass
class Forgetting:
    """What one erasure knows about the person, handed to each eraser."""

    contact: Contact
    contact_ids: list[int]
    lead_ids: list[int]
    # Their values as they may appear in free text and raw bodies.
    identifiers: list[str]
    names: list[str]
    # Public ids of records about them: their receipts are found by subject.
    subjects: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    # The provider's own copies, read before the records are erased: Twilio's
    # message sids (texts both ways) and recording sids, for an eraser that
    # asks the provider to delete them once this transaction commits.
    twilio_messages: list[str] = field(default_factory=list)
    twilio_recordings: list[str] = field(default_factory=list)

    def count(self, table: str, n: int) -> None:
        if n:
            self.counts[table] = self.counts.get(table, 0) + n

    def redact(self, text: str) -> str:
        if not text:
            return text
        for value in self.identifiers:
            text = re.sub(re.escape(value), ERASED, text, flags=re.IGNORECASE)
        for name in self.names:
            text = re.sub(rf"\b{re.escape(name)}\b", ERASED, text, flags=re.IGNORECASE)
        return text

    def redact_json(self, value: Any) -> Any:
        """Personal keys erased whole, every other string redacted."""
        if isinstance(value, dict):
            return {k: ERASED if k in PERSONAL_KEYS and v else self.redact_json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_json(v) for v in value]
        return self.redact(value) if isinstance(value, str) else value


Eraser = Callable[[Forgetting], None]
ERASERS: Registry[Eraser] = Registry("forget eraser")


def forget_eraser_register(name: str, eraser: Eraser) -> None:
    """Let an app that crm does not import erase its own records (called from
    its AppConfig.ready); once per name."""
    ERASERS.register(name, eraser)


@dataclass(frozen=True)
class ForgetResult:
    contact: Contact
    counts: dict[str, int]
    receipt: Receipt | None


def contact_forget(contact: Contact, *, actor: str, reason: str = "") -> ForgetResult:
    """Erase a contact's personal data everywhere, keep every record and sum.

    A contact merged into another stands for the person it became: the
    surviving contact (and every record merged into it) is forgotten.

    Owns one transaction: the erasure and its receipt commit together or not
    at all. The person's leads and then the contact row are locked first
    (the order of crm.locks: a follow-up step locks a lead, then its
    contact), so two erasures of one person run one after the other; the
    second finds nothing left and writes no receipt (its counts are empty).
    """
    # A record merged into another is that person now: forgetting it forgets them.
    contact = contact_root(contact)
    with transaction.atomic():
        person = Q(contact=contact) | Q(contact__merged_into=contact)
        list(Lead.objects.select_for_update(of=("self",), no_key=True).filter(person).order_by("pk").values("pk"))
        contact = Contact.objects.select_for_update(no_key=True).get(pk=contact.pk)
        forgetting = _forgetting(contact)
        _erase_contacts(forgetting)
        _erase_leads(forgetting)
        _erase_comms(forgetting)
        _erase_revenue(forgetting)
        _erase_events(forgetting)
        for eraser in ERASERS.values():
            eraser(forgetting)
        _erase_admin_log(forgetting)
        _erase_receipts(forgetting)
        receipt = None
        if forgetting.counts:
            receipt = receipt_write(
                business=contact.business,
                actor=actor,
                action=ACTION,
                subject=contact.public_id,
                reason=forgetting.redact(reason) or "the person asked to be forgotten",
                after={"erased": dict(sorted(forgetting.counts.items()))},
            )
        return ForgetResult(contact, forgetting.counts, receipt)


def _forgetting(contact: Contact) -> Forgetting:
    # Records merged into this one are the same person.
    contacts = [contact, *Contact.objects.filter(merged_into=contact)]
    contact_ids = [c.pk for c in contacts]
    points = list(ContactPoint.objects.filter(contact_id__in=contact_ids))
    identifiers: set[str] = set()
    for p in points:
        if p.value.startswith("erased:"):
            continue
        identifiers.update(_variants(p.kind, p.value, contact.business.region))
        if p.raw_value:
            identifiers.add(p.raw_value)
    names: set[str] = set()
    for c in contacts:
        names.update(n for n in (c.name, c.first_name, c.last_name) if n)
    leads = Lead.objects.filter(contact_id__in=contact_ids)
    lead_ids = list(leads.values_list("pk", flat=True))
    forgetting = Forgetting(
        contact=contact,
        contact_ids=contact_ids,
        lead_ids=lead_ids,
        # Longest first, so a full value is replaced before a part of it.
        identifiers=sorted((i for i in identifiers if len(i) >= 5), key=len, reverse=True),
        names=sorted(names, key=len, reverse=True),
    )
    forgetting.subjects.update(c.public_id for c in contacts)
    forgetting.subjects.update(p.public_id for p in points)
    forgetting.subjects.update(leads.values_list("public_id", flat=True))
    person = Q(contact_id__in=contact_ids) | Q(lead_id__in=lead_ids)
    texts = Message.objects.filter(person, channel="sms", provider_sid__regex=r"^(SM|MM)[0-9a-fA-F]{32}$")
    forgetting.twilio_messages = sorted({sid for sid in texts.values_list("provider_sid", flat=True) if sid})
    recordings = Call.objects.filter(person).exclude(recording_url="").values_list("recording_url", flat=True)
    forgetting.twilio_recordings = sorted({m.group(0) for url in recordings if (m := _RECORDING_SID.search(url))})
    return forgetting


_RECORDING_SID = re.compile(r"RE[0-9a-fA-F]{32}")


def _variants(kind: str, value: str, region: str) -> Iterable[str]:
    """How a phone or an email appears in typed text and provider bodies."""
    yield value
    yield quote(value, safe="")
    if kind != ContactPointKind.PHONE:
        return
    try:
        number = phonenumbers.parse(value, region or None)
    except phonenumbers.NumberParseException:
        return
    national = str(number.national_number)
    yield national
    for fmt in (phonenumbers.PhoneNumberFormat.NATIONAL, phonenumbers.PhoneNumberFormat.INTERNATIONAL):
        yield phonenumbers.format_number(number, fmt)
    if len(national) == 10:  # NANP as typed in forms: 212-555-0147, 212.555.0147
        yield f"{national[:3]}-{national[3:6]}-{national[6:]}"
        yield f"{national[:3]}.{national[3:6]}.{national[6:]}"


def _erase_contacts(f: Forgetting) -> None:
    n = (
        Contact.objects.filter(pk__in=f.contact_ids)
        .exclude(
            first_name="", last_name="", postal_code="", address="", notes="", automation_paused_reason="forgotten"
        )
        .update(
            first_name="",
            last_name="",
            postal_code="",
            address="",
            notes="",
            automation_paused=True,
            automation_paused_reason="forgotten",
        )
    )
    f.count("crm_contact", n)
    points = ContactPoint.objects.filter(contact_id__in=f.contact_ids).exclude(value__startswith="erased:")
    erased = 0
    for point in points:
        ContactPoint.objects.filter(pk=point.pk).update(value=f"erased:{point.public_id}", raw_value="", is_valid=False)
        erased += 1
    f.count("crm_contactpoint", erased)
    point_ids = ContactPoint.objects.filter(contact_id__in=f.contact_ids).values_list("pk", flat=True)
    events = ConsentEvent.objects.filter(contact_point_id__in=point_ids)
    f.subjects.update(events.values_list("public_id", flat=True))
    # The ledger's trigger lets exactly this through: the evidence, and
    # nothing else, replaced by the marker.
    f.count("crm_consentevent", events.exclude(evidence=_EVIDENCE_ERASED).update(evidence=_EVIDENCE_ERASED))


def _erase_leads(f: Forgetting) -> None:
    n = 0
    for lead in Lead.objects.filter(pk__in=f.lead_ids):
        n += _changed(
            lead,
            {
                "request_text": "",
                "facts": {},
                "fit_reasons": [],
                "next_action": f.redact(lead.next_action),
                "hold_reason": f.redact(lead.hold_reason),
                "lost_reason": f.redact(lead.lost_reason),
                "routing_reason": f.redact(lead.routing_reason),
            },
        )
    f.count("crm_lead", n)
    n = 0
    for touch in LeadTouch.objects.filter(lead_id__in=f.lead_ids):
        f.subjects.add(touch.public_id)
        page = urlsplit(touch.landing_page)
        n += _changed(
            touch,
            {
                "answers": {},
                "gclid": "",
                "fbclid": "",
                "gbraid": "",
                "wbraid": "",
                "meta_lead_id": "",
                "utm": f.redact_json(touch.utm),
                "landing_page": urlunsplit((page.scheme, page.netloc, page.path, "", "")) if touch.landing_page else "",
            },
        )
    f.count("crm_leadtouch", n)
    _redact_rows(f, Task.objects.filter(lead_id__in=f.lead_ids), "crm_task", text=("title", "outcome"))
    _redact_rows(f, Timer.objects.filter(lead_id__in=f.lead_ids), "crm_timer", text=("error",), json=("payload",))
    _redact_rows(f, ExceptionItem.objects.filter(lead_id__in=f.lead_ids), "crm_exceptionitem", text=("detail",))
    f.subjects.update(Enrollment.objects.filter(lead_id__in=f.lead_ids).values_list("public_id", flat=True))


def _redact_rows(
    f: Forgetting, rows: Any, table: str, *, text: tuple[str, ...] = (), json: tuple[str, ...] = ()
) -> None:
    n = 0
    for row in rows:
        if hasattr(row, "public_id"):
            f.subjects.add(row.public_id)
        n += _changed(
            row, {k: f.redact(getattr(row, k)) for k in text} | {k: f.redact_json(getattr(row, k)) for k in json}
        )
    f.count(table, n)


def _changed(row: Any, changes: dict[str, Any]) -> int:
    """Write the changes that differ from the row (1), or nothing (0): a
    second erasure counts nothing."""
    if all(getattr(row, k) == v for k, v in changes.items()):
        return 0
    type(row).objects.filter(pk=row.pk).update(**changes)
    return 1


def _concerning(model: Any, f: Forgetting) -> Any:
    """Their messages or calls: by contact or lead, or (a row recorded before
    the person was known) by their number or address."""
    by_number = Q(to__in=f.identifiers) | Q(from_number__in=f.identifiers)
    return model.objects.filter(
        Q(contact_id__in=f.contact_ids) | Q(lead_id__in=f.lead_ids) | (Q(business_id=f.contact.business_id) & by_number)
    )


def _person_number(f: Forgetting, number: str) -> str:
    # The business's own line stays; the person's number goes.
    return "" if number and f.redact(number) != number else number


def _erase_comms(f: Forgetting) -> None:
    n = 0
    for message in _concerning(Message, f):
        f.subjects.add(message.public_id)
        n += _changed(
            message,
            {
                "body": "",
                "subject": "",
                "draft_reason": "",
                "to": _person_number(f, message.to),
                "from_number": _person_number(f, message.from_number),
            },
        )
    f.count("crm_message", n)
    n = 0
    for call in ModelCall.objects.filter(lead_id__in=f.lead_ids):
        f.subjects.add(call.public_id)
        n += _changed(call, {"prompt_digest": "", "answer_digest": "", "detail": ""})
    f.count("crm_modelcall", n)
    n = 0
    for call in _concerning(Call, f):
        f.subjects.add(call.public_id)
        flags = [{**flag, "evidence": ""} if isinstance(flag, dict) else flag for flag in call.flags or []]
        n += _changed(
            call,
            {
                "transcript": "",
                "recording_url": "",
                "flags": flags,
                "to": _person_number(f, call.to),
                "from_number": _person_number(f, call.from_number),
            },
        )
    f.count("crm_call", n)
    n = 0
    for note in Note.objects.filter(lead_id__in=f.lead_ids):
        f.subjects.add(note.public_id)
        n += _changed(note, {"body": ERASED})
    f.count("crm_note", n)


def _erase_revenue(f: Forgetting) -> None:
    n = 0
    for appt in Appointment.objects.filter(lead_id__in=f.lead_ids):
        f.subjects.add(appt.public_id)
        if appt.location or appt.notes or appt.brief:
            Appointment.objects.filter(pk=appt.pk).update(location="", notes="", brief="")
            n += 1
    f.count("crm_appointment", n)
    _redact_rows(f, Estimate.objects.filter(lead_id__in=f.lead_ids), "crm_estimate", text=("description",))
    for model in (Job, Invoice, Payment):
        f.subjects.update(model.objects.filter(lead_id__in=f.lead_ids).values_list("public_id", flat=True))
    _redact_rows(f, Refund.objects.filter(payment__lead_id__in=f.lead_ids), "crm_refund", text=("reason",))
    f.subjects.update(ReviewRequest.objects.filter(lead_id__in=f.lead_ids).values_list("public_id", flat=True))
    # Our copy of what they wrote on a review site, and our answer to it: the
    # review stays (its rating counts) but no longer says who wrote what.
    n = 0
    for review in Review.objects.filter(contact_id__in=f.contact_ids):
        f.subjects.add(review.public_id)
        n += _changed(review, {"reviewer_name": ERASED, "comment": ERASED, "reply_body": f.redact(review.reply_body)})
    f.count("crm_review", n)


def _erase_events(f: Forgetting) -> None:
    """Raw inbound bodies: those linked from their records, and those that
    carry one of their identifiers or a message or call id of theirs."""
    linked = {
        *LeadTouch.objects.filter(lead_id__in=f.lead_ids).values_list("inbound_event_id", flat=True),
        *_concerning(Message, f).values_list("inbound_event_id", flat=True),
        *ConsentEvent.objects.filter(contact_point__contact_id__in=f.contact_ids).values_list(
            "inbound_event_id", flat=True
        ),
        *Payment.objects.filter(lead_id__in=f.lead_ids).values_list("inbound_event_id", flat=True),
    }
    sids = [
        *_concerning(Message, f).exclude(provider_sid=None).values_list("provider_sid", flat=True),
        *_concerning(Call, f).exclude(provider_sid=None).values_list("provider_sid", flat=True),
    ]
    needles = [n.lower() for n in (*f.identifiers, *sids) if n]
    if needles:
        # `encode(body, 'escape')` keeps ASCII as is, so the search also reads
        # bodies that are not valid UTF-8; one pass over the business's events.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM crm_inboundevent WHERE (business_id = %s OR business_id IS NULL)"
                " AND octet_length(body) > 0 AND lower(encode(body, 'escape')) LIKE ANY(%s)",
                [f.contact.business_id, [f"%{_like(n)}%" for n in needles]],
            )
            linked.update(row[0] for row in cursor.fetchall())
    linked.discard(None)
    events = InboundEvent.objects.filter(pk__in=linked)
    n = 0
    for event in events:
        changes = {"body": b"", "headers": {}, "error": f.redact(event.error)}
        if bytes(event.body) or event.headers or event.error != changes["error"]:
            InboundEvent.objects.filter(pk=event.pk).update(**changes)
            n += 1
    f.count("crm_inboundevent", n)


def _like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", r"\%").replace("_", r"\_")


def _erase_admin_log(f: Forgetting) -> None:
    ids = {Contact: f.contact_ids, Lead: f.lead_ids}
    which = Q(pk__in=[])
    for model, ct in ContentType.objects.get_for_models(Contact, Lead).items():
        which |= Q(content_type=ct, object_id__in=[str(pk) for pk in ids[model]])
    n = 0
    for entry in LogEntry.objects.filter(which):
        n += _changed(
            entry, {"object_repr": f.redact(entry.object_repr), "change_message": f.redact(entry.change_message)}
        )
    f.count("django_admin_log", n)


def _erase_receipts(f: Forgetting) -> None:
    ids = list(
        Receipt.objects.filter(business_id=f.contact.business_id)
        .filter(Q(lead_id__in=f.lead_ids) | Q(subject__in=f.subjects))
        .values_list("pk", flat=True)
    )
    f.count("crm_receiptpersonaldata", receipt_personal_data_erase(ids))
