"""Conversions as records: the accounts a business uploads to, the uploads
the outbox's moments make, and what a person does to them.

An account is saved through `conversion_account_save` (the business file;
the admin shows it): its settings in `config`, its credentials encrypted in
`secrets` and never shown back; a credential the account does not hold is
read from the environment (`account_secrets`). A Google account uploads
through the Data Manager API or the Google Ads API (`google_api`; the
default a business file gets: `account_config_defaults`).

`conversions_fan_out` is an outbox consumer: in the sequencer's transaction
it turns each moment a business maps (qualified, booked, appointment held,
won, paid) into one pending upload per account whose platform can tell the
lead apart — a Google click id (gclid, gbraid, wbraid) on one of its touches,
or Meta's lead id — and a refund or a later payment of a lead whose paid
conversion exists into a restatement of it. The unique key makes each moment
once per lead and account, whatever numbers the outbox twice. Sending them
is agents.conversions'.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from crm.models import (
    CONVERSION_MAX_ERRORS,
    Business,
    ConsentState,
    ConsentStatus,
    ContactPoint,
    ContactPointKind,
    ConversionAccount,
    ConversionAttempt,
    ConversionKind,
    ConversionPlatform,
    ConversionUpload,
    Estimate,
    EventType,
    Lead,
    LeadTouch,
    OutboxEvent,
    Payment,
    Refund,
    Stage,
)
from crm.registry import Registry
from crm.services.forget import ERASED, Forgetting, forget_eraser_register
from crm.services.outbox import OUTBOX_CONSUMERS, Sequenced
from crm.services.receipts import receipt_write
from crm.services.webhooks import webhook_exception_open, webhook_exceptions_resolve

K = ConversionKind
FAILED_EXCEPTION = "conversion_failed"
# Google takes a click's conversions for 90 days after the click.
CLICK_WINDOW = timedelta(days=90)
# The credentials each platform needs, and the setting each falls back to.
SECRET_NAMES: dict[str, dict[str, str]] = {
    ConversionPlatform.GOOGLE: {
        "developer_token": "GOOGLE_ADS_DEVELOPER_TOKEN",
        "client_id": "GOOGLE_ADS_CLIENT_ID",
        "client_secret": "GOOGLE_ADS_CLIENT_SECRET",
        "refresh_token": "GOOGLE_ADS_REFRESH_TOKEN",
    },
    ConversionPlatform.META: {"access_token": "META_CONVERSIONS_ACCESS_TOKEN"},
}

# The API a Google account uploads through: its config's `api`.
DATA_MANAGER_API = "data_manager"
GOOGLE_ADS_API = "google_ads"
GOOGLE_APIS = (DATA_MANAGER_API, GOOGLE_ADS_API)

# Called once after the commit of a sequencer transaction that made uploads
# (agents enqueues a send there); the sweep sends what a lost wake left.
CONVERSIONS_WAKE: Registry[Callable[[], None]] = Registry("conversions wake hook")


class ConversionRefused(ValueError):
    """An account that cannot be saved as given; the message says why."""


# --- accounts ------------------------------------------------------------------------


def account_secrets(account: ConversionAccount) -> dict[str, str]:
    """The account's credentials: its own (the business file's), else the
    environment's. Values are never logged or shown."""
    own = json.loads(account.secrets or "{}")
    names = SECRET_NAMES.get(account.platform, {})
    return {name: str(own.get(name) or getattr(settings, setting, "") or "") for name, setting in names.items()}


def account_secret_sources(account: ConversionAccount) -> dict[str, str]:
    """Where each credential comes from: "business file", "environment" or
    "missing" ("not needed" for a developer token the Data Manager API does
    not take)."""
    own = json.loads(account.secrets or "{}")
    sources = {}
    unused = {"developer_token"} if google_api(account) == DATA_MANAGER_API else set()
    for name, setting in SECRET_NAMES.get(account.platform, {}).items():
        if name in unused:
            sources[name] = "not needed"
            continue
        sources[name] = (
            "business file" if own.get(name) else "environment" if getattr(settings, setting, "") else "missing"
        )
    return sources


def google_api(account: ConversionAccount) -> str:
    """The API a Google account uploads through ("" for another platform).
    An account saved before there was a choice names none: it has been
    uploading through the Google Ads API, and stays there."""
    if account.platform != ConversionPlatform.GOOGLE:
        return ""
    return str(account.config.get("api") or GOOGLE_ADS_API)


def account_config_defaults(*, business: Business, platform: str, config: dict[str, Any]) -> dict[str, Any]:
    """`config` as a business file gives it, with the Google API it leaves
    out. A new account gets the Data Manager API: since 15 June 2026 the only
    one Google opens to an account that never uploaded. An existing account
    keeps its own, and one that names none keeps the Google Ads API it has
    been using: a file written before the key existed must not move it,
    because the move is not free (the refresh token needs the datamanager
    scope, a refund's restatement is not sent, a conversion reads `sent` only
    once Google has processed it), so it is a person's decision, made by
    writing `api: data_manager`."""
    if platform != ConversionPlatform.GOOGLE or "api" in config:
        return config
    current = (
        ConversionAccount.objects.filter(business=business, platform=platform).values_list("config", flat=True).first()
    )
    if current is None:
        return {**config, "api": DATA_MANAGER_API}
    return {**config, "api": current["api"]} if current.get("api") else config


@transaction.atomic
def conversion_account_save(
    *,
    business: Business,
    platform: str,
    config: dict[str, Any],
    actor: str,
    secrets: dict[str, str] | None = None,
    is_active: bool = True,
) -> tuple[ConversionAccount, list[str]]:
    """Create or bring in line the business's account on `platform`; returns
    it and the names of what changed (["created"] for a new one). `secrets`
    replaces the named credentials (the others are kept, so a file may leave
    them to the environment). A receipt names what changed, never a value."""
    if platform not in ConversionPlatform.values:
        raise ConversionRefused(f"unknown conversions platform {platform!r}")
    unknown = sorted(set(secrets or {}) - set(SECRET_NAMES[platform]))
    if unknown:
        raise ConversionRefused(f"unknown credential {unknown[0]!r} for {platform}")
    if platform == ConversionPlatform.GOOGLE and config.get("api", GOOGLE_ADS_API) not in GOOGLE_APIS:
        raise ConversionRefused(f"unknown Google API {config['api']!r} (one of {', '.join(GOOGLE_APIS)})")
    account = ConversionAccount.objects.select_for_update().filter(business=business, platform=platform).first()
    created = account is None
    if account is None:
        account = ConversionAccount(business=business, platform=platform)
    own = json.loads(account.secrets or "{}")
    changed = (
        [] if created else [k for k in sorted({*config, *account.config}) if config.get(k) != account.config.get(k)]
    )
    if not created and account.is_active != is_active:
        changed.append("active")
    for name, value in (secrets or {}).items():
        if own.get(name) != value:
            own[name] = value
            changed.append(name)
    account.config, account.is_active = config, is_active
    account.secrets = json.dumps(own, sort_keys=True) if own else ""
    if created or changed:
        account.full_clean()
        account.save()
        receipt_write(
            business=business,
            subject=account.public_id,
            actor=actor,
            action="conversion.account_saved",
            reason=", ".join(["created"] if created else changed),
            after={
                "platform": platform,
                "kinds": sorted(k for k in (config.get("actions") or config.get("events") or {})),
            },
        )
    return account, ["created"] if created else changed


# --- what a lead's moments are worth --------------------------------------------------


def lead_net_collected(lead: Lead, currency: str) -> Decimal:
    """Payments of the lead in `currency` net of their refunds: revenue."""
    paid = Payment.objects.filter(lead=lead, currency=currency).aggregate(s=Sum("amount"))["s"] or Decimal("0")
    refunded = Refund.objects.filter(payment__lead=lead, currency=currency).aggregate(s=Sum("amount"))["s"]
    return (paid - (refunded or Decimal("0"))).quantize(Decimal("0.01"))


def lead_won_value(lead: Lead) -> tuple[Decimal, str] | None:
    """What the lead was won for: its accepted estimate (the latest), else
    the latest one sent; None when it has neither."""
    estimates = Estimate.objects.filter(lead=lead)
    estimate = (
        estimates.filter(status=Estimate.Status.ACCEPTED).order_by("-decided_at", "-id").first()
        or estimates.filter(sent_at__isnull=False).order_by("-sent_at", "-id").first()
    )
    return (estimate.amount, estimate.currency) if estimate else None


def identifiers_allowed(lead: Lead) -> list[tuple[str, str]]:
    """The contact's email addresses and phones that enhanced conversions
    may carry (hashed), as ("email" | "phone", normalized value).

    The rule: a contact point goes only while the person's current consent
    for it is `granted` — an email for the email channel; a phone for SMS or
    voice, with neither revoked — and never for a contact whose automation is
    paused (a complaint, a revocation in their own words). Unknown consent is
    no consent."""
    contact = lead.contact
    if contact.automation_paused:
        return []
    points = list(ContactPoint.objects.filter(contact=contact, is_valid=True).order_by("kind", "id"))
    states: dict[int, dict[str, str]] = {}
    for point_id, channel, status in ConsentState.objects.filter(contact_point__in=points).values_list(
        "contact_point_id", "channel", "status"
    ):
        states.setdefault(point_id, {})[channel] = status
    allowed = []
    for point in points:
        seen = states.get(point.pk, {})
        if point.kind == ContactPointKind.EMAIL and seen.get("email") == ConsentStatus.GRANTED:
            allowed.append(("email", point.value))
        elif point.kind == ContactPointKind.PHONE:
            voice_or_sms = [seen.get("sms"), seen.get("voice")]
            if ConsentStatus.GRANTED in voice_or_sms and ConsentStatus.REVOKED not in voice_or_sms:
                allowed.append(("phone", point.value))
    return allowed


def normalized_hash(kind: str, value: str) -> str:
    """SHA-256 (hex) of an identifier normalized as Google asks: an email
    trimmed and lower-cased, dots dropped from a gmail.com or googlemail.com
    name; a phone in E.164 (stored so already)."""
    value = value.strip()
    if kind == "email":
        value = value.lower()
        name, _, domain = value.partition("@")
        if domain in ("gmail.com", "googlemail.com"):
            value = f"{name.replace('.', '')}@{domain}"
    return hashlib.sha256(value.encode()).hexdigest()


# --- fan-out --------------------------------------------------------------------------

# The outbox events that are conversion moments (a stage change counts only
# for the stages named here). Booked and held have two: the appointment's own
# event and the lead's stage (a visit recorded by hand moves only the stage);
# whichever comes first is the moment, the unique key drops the other.
_STAGE_KINDS: dict[str, str] = {
    Stage.QUALIFIED: K.QUALIFIED,
    Stage.BOOKED: K.BOOKED,
    Stage.APPOINTMENT_HELD: K.APPOINTMENT_HELD,
    Stage.WON: K.WON,
}
_EVENT_KINDS: dict[str, str] = {
    EventType.APPOINTMENT_BOOKED: K.BOOKED,
    EventType.APPOINTMENT_HELD: K.APPOINTMENT_HELD,
    EventType.PAYMENT_RECORDED: K.PAID,
    EventType.PAYMENT_MATCHED: K.PAID,
    EventType.REFUND_RECORDED: K.RESTATEMENT,
}
_WANTED = {EventType.LEAD_STAGE_CHANGED, *_EVENT_KINDS}
# When the moment happened, by event type (else when the event was written).
_MOMENT_TIME: dict[str, str] = {
    EventType.PAYMENT_RECORDED: "received_at",
    EventType.PAYMENT_MATCHED: "received_at",
    EventType.REFUND_RECORDED: "refunded_at",
    EventType.APPOINTMENT_HELD: "outcome_at",
}


@dataclass(frozen=True)
class _Moment:
    event_id: int
    event_public_id: str
    lead_id: int
    kind: str
    at: datetime
    written_at: datetime


def _moments(events: list[Sequenced]) -> list[_Moment]:
    wanted = [e for e in events if e.lead_id is not None and e.type in _WANTED]
    if not wanted:
        return []
    rows = OutboxEvent.objects.filter(pk__in=[e.id for e in wanted]).values_list("pk", "public_id", "data")
    stored = {pk: (public_id, data) for pk, public_id, data in rows}
    moments = []
    for event in wanted:
        public_id, data = stored[event.id]
        kind = (
            _STAGE_KINDS.get(data.get("to")) if event.type == EventType.LEAD_STAGE_CHANGED else _EVENT_KINDS[event.type]
        )
        if kind is None:
            continue
        raw = data.get(_MOMENT_TIME.get(event.type, ""))
        at = (parse_datetime(raw) if isinstance(raw, str) else None) or event.created_at
        assert event.lead_id is not None
        moments.append(_Moment(event.id, public_id, event.lead_id, kind, at, event.created_at))
    return moments


def _google_touch(touches: list[LeadTouch], at: datetime, enhanced: bool) -> LeadTouch | None:
    """The click a Google conversion is credited to: the latest touch with a
    click id made by the moment (else the latest with one); with enhanced
    conversions on, a Google lead form's touch without one too (matched on
    the contact's hashed identifiers)."""
    clicks = [t for t in touches if t.gclid or t.gbraid or t.wbraid]
    before = [t for t in clicks if t.received_at <= at]
    if before or clicks:
        return (before or clicks)[-1]
    forms = [t for t in touches if t.provider == "google_ads"] if enhanced else []
    return forms[-1] if forms else None


def _meta_touch(touches: list[LeadTouch]) -> LeadTouch | None:
    with_id = [t for t in touches if t.meta_lead_id]
    return with_id[-1] if with_id else None


def conversions_fan_out(business_id: int, events: list[Sequenced]) -> None:
    """The outbox consumer: each conversion moment of the events, as one
    pending upload per active account that maps its kind and can match the
    lead. Runs in the sequencer's transaction, so an event is seen once; the
    unique key refuses a moment twice anyway."""
    accounts = list(ConversionAccount.objects.filter(business_id=business_id, is_active=True))
    if not accounts:
        return
    moments = _moments(events)
    if not moments:
        return
    lead_ids = sorted({m.lead_id for m in moments})
    touches: dict[int, list[LeadTouch]] = {}
    for touch in LeadTouch.objects.filter(lead_id__in=lead_ids).order_by("received_at", "id"):
        touches.setdefault(touch.lead_id, []).append(touch)
    lead_public = dict(Lead.objects.filter(pk__in=lead_ids).values_list("pk", "public_id"))
    now = timezone.now()

    def upload_for(account: ConversionAccount, moment: _Moment, kind: str) -> ConversionUpload | None:
        action = account.mapped(K.PAID if kind == K.RESTATEMENT else kind)
        if not action:
            return None
        lead_touches = touches.get(moment.lead_id, [])
        if account.platform == ConversionPlatform.GOOGLE:
            touch = _google_touch(lead_touches, moment.at, bool(account.config.get("enhanced_conversions")))
        else:
            touch = _meta_touch(lead_touches)
        if touch is None:
            return None
        suffix = f"restatement:{moment.event_public_id}" if kind == K.RESTATEMENT else kind
        google = account.platform == ConversionPlatform.GOOGLE
        return ConversionUpload(
            business_id=business_id,
            account=account,
            lead_id=moment.lead_id,
            platform=account.platform,
            kind=kind,
            key=f"{account.platform}:{lead_public[moment.lead_id]}:{suffix}",
            event_id=moment.event_id,
            touch=touch,
            action=action,
            occurred_at=moment.at,
            window_ends_at=touch.received_at + CLICK_WINDOW if google else None,
            # Due since the moment was written.
            next_attempt_at=moment.written_at,
            created_at=now,
        )

    # First the moments themselves; a payment whose lead has its paid
    # upload already (made by an earlier payment) restates it instead.
    firsts = [u for a in accounts for m in moments if m.kind != K.RESTATEMENT and (u := upload_for(a, m, m.kind))]
    made = ConversionUpload.objects.bulk_create(firsts, ignore_conflicts=True, batch_size=500)
    paid = {
        (u.account_id, u.lead_id): u
        for u in ConversionUpload.objects.filter(account__in=accounts, lead_id__in=lead_ids, kind=K.PAID).only(
            "pk", "account_id", "lead_id", "event_id"
        )
    }
    restatements = []
    for account in accounts:
        for moment in moments:
            original = paid.get((account.pk, moment.lead_id))
            if original is None or original.event_id == moment.event_id:
                continue
            if moment.kind not in (K.PAID, K.RESTATEMENT):
                continue
            upload = upload_for(account, moment, K.RESTATEMENT)
            if upload is not None:
                upload.restates = original
                restatements.append(upload)
    ConversionUpload.objects.bulk_create(restatements, ignore_conflicts=True, batch_size=500)
    if made or restatements:
        transaction.on_commit(_wake, robust=True)


def _wake() -> None:
    for hook in CONVERSIONS_WAKE.values():
        hook()


# --- what a person does ------------------------------------------------------------------


@transaction.atomic
def conversion_upload_replay(upload: ConversionUpload, *, actor: str, now: datetime | None = None) -> bool:
    """Upload a finished upload (failed, skipped, sent or dry_run) again, with
    the same idempotency key (the platform recognizes one it has) and a fresh
    allowance of tries; False while it is still waiting or in flight. A receipt."""
    now = now or timezone.now()
    before = upload.status
    replayed = ConversionUpload.objects.filter(pk=upload.pk, status__in=ConversionUpload.FINAL).update(
        status=ConversionUpload.Status.PENDING,
        next_attempt_at=now,
        claimed_at=None,
        error_limit=F("errors") + CONVERSION_MAX_ERRORS,
    )
    if not replayed:
        return False
    upload.refresh_from_db()
    receipt_write(
        business=upload.business,
        lead=upload.lead,
        subject=upload.public_id,
        actor=actor,
        action="conversion.replayed",
        before={"status": before},
        after={"status": upload.status, "error_limit": upload.error_limit},
    )
    transaction.on_commit(_wake, robust=True)
    return True


def conversion_failed_open(upload: ConversionUpload, detail: str) -> None:
    """One open item for the business's manager per failed upload."""
    webhook_exception_open(
        business_id=upload.business_id,
        lead_id=upload.lead_id,
        kind=FAILED_EXCEPTION,
        subject=upload.public_id,
        detail=detail,
    )


def conversion_failed_resolve(upload: ConversionUpload, *, actor: str) -> int:
    return webhook_exceptions_resolve(
        business_id=upload.business_id, kind=FAILED_EXCEPTION, subject=upload.public_id, actor=actor
    )


# What identifies the person in an upload's request: their hashed email and
# phone, the click and Meta's lead id.
_PERSONAL = frozenset({"user_identifiers", "gclid", "gbraid", "wbraid", "user_data"})


def _without_person(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ERASED if k in _PERSONAL else _without_person(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_person(v) for v in value]
    return value


def conversions_forget(f: Forgetting) -> None:
    """A forgotten person's uploads keep their kind, value and outcome; the
    request loses their identifiers, and one not sent yet is never sent
    (its touch lost the click too: it would be skipped)."""
    n = 0
    for upload in ConversionUpload.objects.filter(lead_id__in=f.lead_ids):
        f.subjects.add(upload.public_id)
        kept = {"payload": _without_person(upload.payload), "response": _without_person(upload.response)}
        if kept != {"payload": upload.payload, "response": upload.response}:
            ConversionUpload.objects.filter(pk=upload.pk).update(**kept)
            n += 1
    f.count("crm_conversionupload", n)
    n = 0
    # Google's answer repeats the click id.
    for attempt in ConversionAttempt.objects.filter(upload__lead_id__in=f.lead_ids).exclude(response={}):
        response = _without_person(attempt.response)
        if response != attempt.response:
            ConversionAttempt.objects.filter(pk=attempt.pk).update(response=response)
            n += 1
    f.count("crm_conversionattempt", n)


def register() -> None:
    OUTBOX_CONSUMERS.register("conversions", conversions_fan_out)
    forget_eraser_register("conversions", conversions_forget)
