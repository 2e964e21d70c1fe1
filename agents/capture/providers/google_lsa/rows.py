"""Reading the rows the poller stored: a `local_services_lead` as a Capture,
a `local_services_lead_conversation` as a message. Pure; MalformedPayload for
a row we cannot read.

Google writes every time as "YYYY-MM-DD HH:MM:SS" in the Google Ads account's
time zone: the source's `timezone`, else the business's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from agents.capture.base import Capture, split_name
from crm.models import Provider, Source
from crm.services.inbound_handlers import MalformedPayload

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
LEAD_NAME = re.compile(r"^customers/\d+/localServicesLeads/\d+$")
CONVERSATION_NAME = re.compile(r"^customers/\d+/localServicesLeadConversations/\d+$")
CAMPAIGN_NAME = re.compile(r"^customers/\d+/campaigns/(\d+)$")
PHONE_CALL = "PHONE_CALL"
# What the person did on Google: a call is a call; a message, a booking
# request or a coupon is a written request, so a form. Not "dm": a DM is
# answered in its own thread, and Google's API cannot write in this one.
CHANNELS = {PHONE_CALL: "call"}
# The words of a message; a PHONE_CALL conversation carries call details instead.
WORDS = ("MESSAGE", "SMS", "EMAIL", "WHATSAPP", "BOOKING")


def account_zone(source: Source) -> ZoneInfo:
    return ZoneInfo(str(source.config.get("timezone") or source.business.timezone))


def account_time(raw: Any, zone: ZoneInfo, where: str) -> datetime:
    """Google's account-local time string as an aware UTC datetime."""
    try:
        local = datetime.strptime(str(raw), TIME_FORMAT).replace(tzinfo=zone)
    except ValueError as exc:
        raise MalformedPayload(f"{where} {raw!r} is not a time as Google writes it (YYYY-MM-DD HH:MM:SS)") from exc
    return local.astimezone(UTC)


def time_valid(raw: Any) -> bool:
    try:
        datetime.strptime(str(raw), TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return False
    return True


def _object(container: dict[str, Any], key: str) -> dict[str, Any]:
    value = container.get(key)
    if not isinstance(value, dict):
        raise MalformedPayload(f"the row has no {key} object")
    return value


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _words(code: str) -> str:
    """ "xcat:service_area_business_hvac" → "hvac", "install_heating" → "install heating"."""
    return code.rsplit(":", 1)[-1].removeprefix("service_area_business_").replace("_", " ").strip()


@dataclass(frozen=True)
class LeadRow:
    resource_name: str
    lead_type: str
    occurred_at: datetime
    created: str  # as Google wrote it: what the poller's cursor holds
    phone: str
    extension: str
    consumer_name: str
    category_id: str
    service_id: str
    campaign_id: str
    data: dict[str, Any]


def lead_read(row: dict[str, Any], zone: ZoneInfo) -> LeadRow:
    """One stored GoogleAdsRow of `local_services_lead`."""
    lead = _object(row, "local_services_lead")
    name = _text(lead.get("resource_name"))
    if not LEAD_NAME.match(name):
        raise MalformedPayload(f"local_services_lead.resource_name {name!r} is not a Local Services lead's")
    created = _text(lead.get("creation_date_time"))
    occurred_at = account_time(created, zone, "local_services_lead.creation_date_time")
    contact = lead.get("contact_details")
    contact = contact if isinstance(contact, dict) else {}
    campaign = CAMPAIGN_NAME.match(_text(lead.get("campaign")))
    return LeadRow(
        resource_name=name,
        lead_type=_text(lead.get("lead_type")) or "UNSPECIFIED",
        occurred_at=occurred_at,
        created=created,
        phone=_text(contact.get("phone_number")),
        extension=_text(contact.get("phone_number_extension")),
        consumer_name=_text(contact.get("consumer_name")),
        category_id=_text(lead.get("category_id")),
        service_id=_text(lead.get("service_id")),
        campaign_id=campaign.group(1) if campaign else "",
        data=lead,
    )


def lead_capture(lead: LeadRow) -> Capture:
    first, last = split_name(lead.consumer_name)
    answers: dict[str, Any] = {
        "lsa_lead": lead.resource_name,
        "lead_type": lead.lead_type,
        "category_id": lead.category_id,
        "service_id": lead.service_id,
    }
    for key in ("lead_status", "lead_charged", "locale"):
        if key in lead.data:
            answers[key] = lead.data[key]
    phones = [lead.phone] if lead.phone else []
    if lead.extension:
        # A Google tracking number: it reaches the person only with the
        # extension, and many people share it, so it is no phone of theirs
        # to match on or text.
        answers["tracking_number"] = f"{lead.phone} ext. {lead.extension}"
        phones = []
    return Capture(
        channel=CHANNELS.get(lead.lead_type, "form"),
        occurred_at=lead.occurred_at,
        first_name=first,
        last_name=last,
        phones=phones,
        service_hint=" ".join(w for w in (_words(lead.service_id), _words(lead.category_id)) if w),
        answers=answers,
        touch={"provider": Provider.GOOGLE_LSA, "campaign_id": lead.campaign_id},
    )


@dataclass(frozen=True)
class ConversationRow:
    resource_name: str
    lead: str
    channel: str
    participant: str
    occurred_at: datetime
    at: str
    text: str


def conversation_read(row: dict[str, Any], zone: ZoneInfo) -> ConversationRow:
    """One stored GoogleAdsRow of `local_services_lead_conversation`."""
    conversation = _object(row, "local_services_lead_conversation")
    name = _text(conversation.get("resource_name"))
    if not CONVERSATION_NAME.match(name):
        raise MalformedPayload(
            f"local_services_lead_conversation.resource_name {name!r} is not a Local Services conversation's"
        )
    lead = _text(conversation.get("lead"))
    if not LEAD_NAME.match(lead):
        raise MalformedPayload(f"local_services_lead_conversation.lead {lead!r} names no Local Services lead")
    at = _text(conversation.get("event_date_time"))
    occurred_at = account_time(at, zone, "local_services_lead_conversation.event_date_time")
    channel = _text(conversation.get("conversation_channel"))
    details = conversation.get("message_details")
    details = details if isinstance(details, dict) else {}
    lines = [_text(details.get("text"))] if channel in WORDS else []
    urls = details.get("attachment_urls")
    lines += [f"[attachment] {url}" for url in (urls if isinstance(urls, list) else []) if _text(url)]
    return ConversationRow(
        resource_name=name,
        lead=lead,
        channel=channel,
        participant=_text(conversation.get("participant_type")),
        occurred_at=occurred_at,
        at=at,
        text="\n".join(line for line in lines if line),
    )
