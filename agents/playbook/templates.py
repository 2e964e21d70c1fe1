"""The approved playbook: rendering templates and keeping their versions.

A template row holds the text in force. Changing it takes two acts by two
parties: someone (a person or an agent role) proposes a revision with
`template_revise`, and a person of the business (an owner or a manager, not
the proposer) makes it the text in force with `template_approve`. Until then
the approved text stays in force; automated sends use only approved
templates (`template_for_automation`).

Rendering fills placeholders from a context and refuses, rather than guesses,
when one is unknown or has no value: no person ever receives "{first_name}".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from crm.models import Business, Lead, MessageTemplate, MessageTemplateVersion, Role, TeamMember
from crm.services.receipts import receipt_write

# What a lead supplies (`playbook_context`).
LEAD_PLACEHOLDERS = frozenset({"first_name", "last_name", "business", "owner_first_name", "service"})
# Supplied by the step that sends the template (a booking link, the callback
# number, the appointment time, the numbered slots the after-hours
# receptionist offers, the review request's counted link); the demo
# playbook's follow-ups use them.
STEP_PLACEHOLDERS = frozenset({"booking_url", "business_phone", "appointment_time", "slot_options", "review_url"})
PLACEHOLDERS = LEAD_PLACEHOLDERS | STEP_PLACEHOLDERS
# Placeholders whose values the lead typed in: not approved text, so their
# values are checked before they go out under an approved template.
LEAD_TYPED_PLACEHOLDERS = frozenset({"first_name", "last_name"})

# The proposer of the text a template had before it had versions.
BUSINESS_FILE = "business_file"
APPROVER_ROLES = (Role.OWNER, Role.MANAGER)

_TOKEN = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"^[a-z_]+$")


class TemplateError(Exception):
    """A template cannot be used, revised or approved as asked."""


class TemplateRenderError(TemplateError):
    """The text cannot be rendered: a placeholder is unknown, malformed or
    has no value. `placeholders` names the ones at fault."""

    def __init__(self, message: str, placeholders: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.placeholders = placeholders


class TemplateUnavailable(TemplateError):
    """No approved template with that key may be used for automation."""


class TemplateApprovalRefused(TemplateError):
    """The approval is not a person's act the playbook accepts."""


# --- placeholders and rendering -------------------------------------------------


def placeholders_of(text: str) -> list[str]:
    """The placeholders `text` uses, in order, each once.

    Raises TemplateRenderError for a stray brace, a malformed name
    ("{First Name}", "{0}", "{name.upper}") or a name the playbook does not know.
    """
    outside = _TOKEN.sub("", text)
    if "{" in outside or "}" in outside:
        raise TemplateRenderError(f"unbalanced brace in {text!r}: write placeholders like {{first_name}}")
    names = list(dict.fromkeys(_TOKEN.findall(text)))
    malformed = tuple(name for name in names if not _NAME.match(name))
    if malformed:
        raise TemplateRenderError(f"malformed placeholder {{{malformed[0]}}}", malformed)
    unknown = tuple(name for name in names if name not in PLACEHOLDERS)
    if unknown:
        known = ", ".join(f"{{{name}}}" for name in sorted(PLACEHOLDERS))
        raise TemplateRenderError(f"unknown placeholder {{{unknown[0]}}} (known: {known})", unknown)
    return names


def text_render(text: str, context: Mapping[str, str]) -> str:
    """`text` with every placeholder replaced by its value from `context`.

    Values are inserted as they are, in one pass: a value that itself looks
    like a placeholder is not expanded again. A placeholder without a value
    (absent, or blank) is an error naming it; so is an unknown one.
    """
    names = placeholders_of(text)
    missing = tuple(name for name in names if not str(context.get(name) or "").strip())
    if missing:
        listed = ", ".join(f"{{{name}}}" for name in missing)
        raise TemplateRenderError(f"no value for {listed}", missing)
    return _TOKEN.sub(lambda match: str(context[match.group(1)]).strip(), text)


def template_render(template: MessageTemplate, context: Mapping[str, str]) -> str:
    """The template's body in force, rendered (see `text_render`).

    Renders approved and unapproved templates alike, for previews; anything
    sent automatically gets its template from `template_for_automation`.
    """
    try:
        return text_render(template.body, context)
    except TemplateRenderError as exc:
        raise TemplateRenderError(f"template {template.key!r}: {exc}", exc.placeholders) from exc


def playbook_context(lead: Lead) -> dict[str, str]:
    """The lead placeholders this lead has values for; the others are left
    out, so a template that needs them refuses to render — except the two
    greeting words, which fall back to neutral words that promise nothing
    ("Hi there", "our team will reach out"): a caller we only know by number,
    or a lead not yet routed to an owner, still gets its acknowledgement."""
    contact, business = lead.contact, lead.business
    values = {
        "first_name": contact.first_name.strip() or GREETING_FALLBACKS["first_name"],
        "last_name": contact.last_name,
        "business": business.name,
        "owner_first_name": _first_name_of(lead.owner) or GREETING_FALLBACKS["owner_first_name"],
        "service": lead.service_line.name if lead.service_line else "",
    }
    return {key: value.strip() for key, value in values.items() if value and value.strip()}


GREETING_FALLBACKS = {"first_name": "there", "owner_first_name": "our team"}


def _first_name_of(member: TeamMember | None) -> str:
    if member is None:
        return ""
    first = str(getattr(member.user, "first_name", "") or "").strip()
    if first:
        return first
    parts = member.display_name.split()
    return parts[0] if parts else ""


# --- reading the playbook -------------------------------------------------------


def template_for_automation(business: Business, key: str, *, channel: str | None = None) -> MessageTemplate:
    """The template an automated step may send: it exists for this business,
    is approved, and (when `channel` is given) is for that channel.
    Raises TemplateUnavailable otherwise."""
    template = MessageTemplate.objects.filter(business=business, key=key).first()
    if template is None:
        raise TemplateUnavailable(f"{business.slug} has no template {key!r}")
    if not template.approved:
        raise TemplateUnavailable(f"template {key!r} is not approved: a person must approve it before automated use")
    if channel is not None and template.channel != channel:
        raise TemplateUnavailable(f"template {key!r} is a {template.channel} template, not {channel}")
    return template


def template_version_in_force(template: MessageTemplate) -> MessageTemplateVersion | None:
    """The approved version whose text the template holds now.

    None when the text in force was never approved here: it came from the
    business file (approved by whoever wrote the file), before or after any
    version was approved in the back office.
    """
    latest = template.versions.filter(approved_at__isnull=False).order_by("-approved_at", "-version").first()
    if latest is not None and (latest.body, latest.subject) == (template.body, template.subject):
        return latest
    return None


# --- revising and approving -------------------------------------------------------


@transaction.atomic
def template_revise(
    template: MessageTemplate, body: str, actor: AbstractBaseUser | str, *, subject: str | None = None
) -> MessageTemplateVersion:
    """Propose new text for a template: a new, unapproved version.

    The text in force does not change. `actor` is the user who wrote it (an
    active member of the business), or an automated role as "agent:<role>". The first revision of a template also
    records, as version 1, the text it had (from the business file). Proposing
    the same text again while it waits is a no-op that returns the waiting
    version. One transaction, the template row locked so versions are numbered
    one at a time; writes a `template.revised` receipt.
    """
    proposer, proposer_user_id = _proposer(actor)
    template = MessageTemplate.objects.select_for_update().get(pk=template.pk)
    if proposer_user_id is not None and not _member(template, proposer_user_id):
        raise TemplateError(
            f"{proposer} is not on the team of {template.business.slug}: they cannot revise its playbook"
        )
    body = body.strip()
    subject = template.subject if subject is None else subject.strip()
    if not body:
        raise TemplateError(f"template {template.key!r}: the text is empty")
    placeholders_of(body)
    placeholders_of(subject)

    latest = template.versions.order_by("-version").first()
    if (
        latest is not None
        and latest.approved_at is None
        and (latest.body, latest.subject) == (body, subject)
        and latest.proposed_by == proposer
    ):
        return latest
    if (body, subject) == (template.body, template.subject):
        raise TemplateError(f"template {template.key!r} already says this")
    if latest is None:
        latest = MessageTemplateVersion.objects.create(
            business_id=template.business_id,
            template=template,
            version=1,
            subject=template.subject,
            body=template.body,
            proposed_by=BUSINESS_FILE,
        )
    version = MessageTemplateVersion.objects.create(
        business_id=template.business_id,
        template=template,
        version=latest.version + 1,
        subject=subject,
        body=body,
        proposed_by=proposer,
        proposed_by_user_id=proposer_user_id,
    )
    receipt_write(
        business=template.business,
        actor=proposer,
        action="template.revised",
        subject=version.public_id,
        reason=f"new text proposed for {template.key} (version {version.version}); the approved text stays in force",
        before=_state(template),
        after={"template": template.public_id, "version": version.version, "subject": subject, "body": body},
    )
    return version


@transaction.atomic
def template_approve(version: MessageTemplateVersion, user: AbstractBaseUser) -> MessageTemplateVersion:
    """A person makes `version` the template's text in force.

    Refused unless `user` is a person (a user, never a role name), active, an
    owner or manager of the template's business, and not the proposer of this
    text (also a database check). The template's body, subject and approved
    flag change in the same transaction as the version's approval and the
    `template.approved` receipt. Approving the version already in force again
    is a no-op; a version approved before and replaced since is brought back
    by proposing its text anew.
    """
    if not isinstance(user, AbstractBaseUser) or not user.is_authenticated:
        raise TemplateApprovalRefused("approving a template is a person's act: pass the approving user")
    if not user.is_active:
        raise TemplateApprovalRefused(f"{user.get_username()} is not an active user")
    template = MessageTemplate.objects.select_for_update().get(pk=version.template_id)
    version = MessageTemplateVersion.objects.select_for_update().get(pk=version.pk)
    if not _member(template, user.pk, roles=APPROVER_ROLES):
        raise TemplateApprovalRefused(
            f"{user.get_username()} is not an owner or manager of {template.business.slug}: they cannot approve its "
            "playbook"
        )
    if version.proposed_by_user_id == user.pk:
        raise TemplateApprovalRefused(f"{user.get_username()} proposed this text: someone else must approve it")
    if version.approved_at is not None:
        if (version.body, version.subject) == (template.body, template.subject):
            return version
        raise TemplateApprovalRefused(
            f"version {version.version} of {template.key} was approved before and replaced since: propose its text "
            "again"
        )

    before = _state(template)
    version.approved_by_id = user.pk
    version.approved_at = timezone.now()
    version.save(update_fields=["approved_by", "approved_at"])
    template.body, template.subject, template.approved = version.body, version.subject, True
    template.save(update_fields=["body", "subject", "approved"])
    receipt_write(
        business=template.business,
        actor=user.get_username(),
        action="template.approved",
        subject=version.public_id,
        reason=f"version {version.version} of {template.key} is now the approved text",
        before=before,
        after=_state(template, version=version.version),
    )
    return version


def _member(template: MessageTemplate, user_id: int, *, roles: tuple[str, ...] = tuple(Role.values)) -> bool:
    return TeamMember.objects.filter(
        business_id=template.business_id, user_id=user_id, is_active=True, role__in=roles
    ).exists()


def _proposer(actor: AbstractBaseUser | str) -> tuple[str, int | None]:
    if isinstance(actor, AbstractBaseUser):
        return actor.get_username(), actor.pk
    if not actor.startswith("agent:") or actor == "agent:":
        # A username string cannot be told from a role name: people pass themselves.
        raise TemplateError(f"actor {actor!r}: pass the user, or an automated role as 'agent:<role>'")
    return actor, None


def _state(template: MessageTemplate, *, version: int | None = None) -> dict[str, Any]:
    if version is None:
        in_force = template_version_in_force(template)
        version = in_force.version if in_force else None
    return {
        "template": template.public_id,
        "version": version,
        "approved": template.approved,
        "subject": template.subject,
        "body": template.body,
    }
