"""Replies out: a public answer to a review goes to Google only after a
person proposed it and another person approved it.

- The draft (`reply_drafts`): the business's approved playbook text
  `review_reply_positive` (4 and 5 stars) or `review_reply_negative` (the
  others), rendered for the reviewer; without one, a plain built-in text.
  Either only prefills the form: nothing is sent because it was drafted.
- Proposing (`review_reply_propose`, a person of the business): the claims
  guard reads the text against the playbook's facts first. A public reply
  is read by everyone, so a promise the playbook does not make (a price, a
  discount, a guarantee, a time, a diagnosis) is refused with what it
  found; one the playbook backs is named to the approver. The proposal is
  an ApprovalRequest of kind `review_reply` (payload: the review, the text,
  the reply state before it) and the review waits (`pending_approval`).
- Deciding is the approvals app's: a manager or owner who is not the
  proposer approves, may reword (the guard reads the new words again,
  `recheck`), or rejects; a rejection or an expiry puts the review back as
  it was. An approval keeps the approved text on the review and enqueues
  the post after the decision commits: Google is never called inside the
  decision's transaction.
- Posting (`review_reply_post`): `PUT …/reply` with the text approved, and
  only that text. Success: `posted` with Google's time; any failure:
  `failed` with why, shown on the reviews page with a Retry button
  (`review_reply_retry`). The periodic job posts an approved reply whose
  enqueue was lost. A PUT replaces the one reply a review has, so posting
  twice leaves one reply.
Each step writes a receipt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from agents.playbook.claims_guard import Finding, claims_scan, claims_unbacked
from agents.playbook.facts import playbook_facts
from agents.playbook.templates import GREETING_FALLBACKS, TemplateRenderError, text_render
from agents.queue import task_enqueue
from agents.reviews.google_business import PROVIDER, REPLY_MAX_BYTES, GoogleBusinessAdapter
from agents.reviews.pull import connection_of
from agents.sync.base import ADAPTERS, SyncError
from agents.sync.engine import with_session
from approvals.handlers import approval_handler_register
from approvals.kinds import approval_edit_register
from approvals.models import ApprovalRequest
from approvals.services import ApprovalConflict, ApprovalInvalid, approval_request_open
from crm.models import Business, MessageTemplate, Review, SyncConnection
from crm.services.inbound_handlers import RetryLater
from crm.services.receipts import receipt_write

KIND = ApprovalRequest.Kind.REVIEW_REPLY
POSITIVE, NEGATIVE = "review_reply_positive", "review_reply_negative"
POST_TASK = "agents.tasks.review_reply_post"
ACTOR = "agent:review_replies"
# Only a prefill: a person reads it, may change it, and proposes it as theirs.
BUILT_IN = {
    POSITIVE: "Thank you for the kind words, {first_name}. We're glad we could help, and we appreciate you "
    "choosing {business}.",
    NEGATIVE: "Thank you for telling us, {first_name}. We're sorry your visit fell short. Please call us so we "
    "can talk it through. {business}",
}
CLAIMS = {
    "price": "a price",
    "discount": "a discount or free offer",
    "warranty": "a guarantee",
    "arrival_time": "a time",
    "licensed_diagnosis": "a diagnosis of licensed work",
}
Status = Review.ReplyStatus


class ReplyRefused(Exception):
    """The reply cannot be proposed or posted as asked; nothing was written."""


@dataclass(frozen=True)
class ReplyDraft:
    body: str
    source: str  # where the words come from, in words


def template_key(review: Review) -> str:
    return POSITIVE if (review.rating or 0) >= 4 else NEGATIVE


def _context(review: Review, business: Business) -> dict[str, str]:
    words = review.reviewer_name.split()
    return {
        "first_name": words[0] if words else GREETING_FALLBACKS["first_name"],
        "last_name": " ".join(words[1:]),
        "business": business.name,
        "owner_first_name": GREETING_FALLBACKS["owner_first_name"],
    }


def reply_drafts(business: Business, reviews: list[Review]) -> dict[int, ReplyDraft]:
    """A prefill for each review's reply form, by review id (one query)."""
    templates = {
        t.key: t for t in MessageTemplate.objects.filter(business=business, key__in=(POSITIVE, NEGATIVE), approved=True)
    }
    drafts: dict[int, ReplyDraft] = {}
    for review in reviews:
        key = template_key(review)
        context = _context(review, business)
        template = templates.get(key)
        if template is not None:
            try:
                drafts[review.pk] = ReplyDraft(text_render(template.body, context), f"the playbook's {key}")
                continue
            except TemplateRenderError:
                pass  # a placeholder a review cannot fill: the built-in text instead
        drafts[review.pk] = ReplyDraft(
            text_render(BUILT_IN[key], context), f"a built-in text (no approved {key} in the playbook): read it first"
        )
    return drafts


# --- the claims guard -----------------------------------------------------------------------------


def _said(findings: list[Finding]) -> str:
    return ", ".join(f"{CLAIMS.get(f.kind, f.kind)} “{f.excerpt}”" for f in findings)


def reply_check(business: Business, body: str) -> list[str]:
    """The claims guard on a reply: refuses (ReplyRefused) a text that is
    empty, too long for Google, or promises what the playbook does not;
    returns, in words, the claims it makes that the playbook backs."""
    if not body.strip():
        raise ReplyRefused("write the reply")
    if len(body.encode()) > REPLY_MAX_BYTES:
        raise ReplyRefused(f"Google takes a reply of at most {REPLY_MAX_BYTES} bytes")
    unbacked = claims_unbacked(body, [fact.text for fact in playbook_facts(business)])
    if unbacked:
        raise ReplyRefused(
            f"the reply promises what the playbook does not: {_said(unbacked)}. A public reply says only what "
            "the playbook says; take anything more to the customer directly"
        )
    findings = claims_scan(body)
    return [f"states {_said(findings)}, as the playbook does"] if findings else []


# --- proposing and deciding -----------------------------------------------------------------------------


def _locked(review: Review) -> Review:
    return Review.objects.select_for_update(of=("self",)).select_related("business", "lead").get(pk=review.pk)


def _requests_of(review: Review) -> Any:
    return ApprovalRequest.objects.filter(business_id=review.business_id, kind=KIND, payload__review=review.public_id)


@transaction.atomic
def review_reply_propose(review: Review, body: str, *, user: Any) -> ApprovalRequest:
    """`user` proposes `body` as the business's public reply: checked by the
    claims guard, then an approval request another person decides, and the
    review waits for it. One transaction, the review's row locked; a reply
    already waiting for a decision refuses a second (ReplyRefused)."""
    body = body.strip()
    findings = reply_check(review.business, body)
    current = _locked(review)
    if current.reply_status == Status.PENDING_APPROVAL:
        raise ReplyRefused("a reply to this review is waiting for a decision already")
    stars = f"{current.rating}-star " if current.rating else ""
    flagged = f" ({'; '.join(findings)})" if findings else ""
    who = current.reviewer_name or "an anonymous reviewer"
    request = approval_request_open(
        business=current.business,
        kind=KIND,
        summary=f"Reply on Google to {who}'s {stars}review{flagged}: {body}",
        proposed_by=user.get_username(),
        proposed_by_user=user,
        lead=current.lead,
        payload={
            "review": current.public_id,
            "body": body,
            "was": current.reply_status,
            "rating": current.rating,
            "reviewer": current.reviewer_name,
            "comment": current.comment[:500],
        },
    )
    before = current.reply_status
    Review.objects.filter(pk=current.pk).update(reply_status=Status.PENDING_APPROVAL, reply_error="")
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=user.get_username(),
        action="review.reply_proposed",
        reason=f"waits for {request.public_id}{flagged}",
        before={"reply": before},
        after={"reply": Status.PENDING_APPROVAL, "approval": request.public_id},
    )
    review.refresh_from_db()
    return request


def _review_of(request: ApprovalRequest) -> Review:
    # The review is named in the payload when proposed, and a decision cannot change that key.
    review = Review.objects.filter(
        business_id=request.business_id, public_id=str(request.payload.get("review"))
    ).first()
    if review is None:
        raise ApprovalConflict(f"{request.public_id}: its review is no longer here")
    return _locked(review)


def _check(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    if _review_of(request).reply_status != Status.PENDING_APPROVAL:
        raise ApprovalConflict(f"{request.public_id}: the review's reply moved on since it was proposed")


def _recheck(request: ApprovalRequest, payload: dict[str, Any]) -> list[str]:
    try:
        return reply_check(request.business, str(payload.get("body") or ""))
    except ReplyRefused as exc:
        raise ApprovalInvalid(str(exc), {"payload": {"body": [str(exc)]}}) from exc


def _approved(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    """Inside the decision's transaction: the approved text kept on the
    review, the post enqueued for after the commit."""
    review = _review_of(request)
    body = str(payload.get("body") or "")
    Review.objects.filter(pk=review.pk).update(reply_body=body, reply_error="")
    receipt_write(
        business=review.business,
        lead=review.lead,
        subject=review.public_id,
        actor=request.decided_by.get_username() if request.decided_by else ACTOR,
        action="review.reply_approved",
        reason=f"approved in {request.public_id}",
        after={"reply": Status.PENDING_APPROVAL, "approval": request.public_id},
    )
    task_enqueue(POST_TASK, review.pk, group="reviews", save=False)


def _not_approved(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    """Rejected or expired: the review's reply as it was before the proposal."""
    review = _review_of(request)
    was = str(payload.get("was") or "")
    Review.objects.filter(pk=review.pk, reply_status=Status.PENDING_APPROVAL).update(reply_status=was)
    receipt_write(
        business=review.business,
        lead=review.lead,
        subject=review.public_id,
        actor=request.decided_by.get_username() if request.decided_by else ACTOR,
        action="review.reply_not_approved",
        reason=f"{request.public_id} {request.status}",
        before={"reply": Status.PENDING_APPROVAL},
        after={"reply": was},
    )


class ReplyEdit(serializers.Serializer):
    """An approver may reword the reply; which review it answers is fixed."""

    body = serializers.CharField(max_length=REPLY_MAX_BYTES, help_text="The reply to post instead")


# --- posting ---------------------------------------------------------------------------------------------


def approved_reply(review: Review) -> ApprovalRequest | None:
    """The latest decision on the review's reply when it is an approval of
    the text the review holds: the only text that may be posted."""
    latest = _requests_of(review).order_by("-created_at", "-pk").first()
    if latest is None or latest.status != ApprovalRequest.Status.APPROVED:
        return None
    return latest if str(latest.payload.get("body") or "") == review.reply_body and review.reply_body else None


def review_reply_post(review_id: int, *, now: datetime | None = None) -> Review:
    """Post the review's approved reply to Google (see the module): `posted`
    or `failed`, each with its receipt. A review with nothing approved to
    post is returned as it is. Google is called outside any transaction."""
    review = Review.objects.select_related("business", "lead").get(pk=review_id)
    if review.reply_status not in (Status.PENDING_APPROVAL, Status.FAILED):
        return review
    approval = approved_reply(review)
    if approval is None:
        return review
    body = review.reply_body
    connection = connection_of(review.business)
    adapter = ADAPTERS[PROVIDER]
    assert isinstance(adapter, GoogleBusinessAdapter)
    try:
        if connection is None or connection.status != SyncConnection.Status.ACTIVE:
            raise ReplyRefused("Google Business Profile is not connected: connect it again, then retry")
        answer = with_session(connection, lambda session: adapter.reply_put(session, review.external_id, body))
    except (ReplyRefused, SyncError, RetryLater) as exc:
        return _post_recorded(review, body, approval, error=str(exc) or type(exc).__name__, at=now or timezone.now())
    at = parse_datetime(str(answer.get("updateTime") or "")) or now or timezone.now()
    return _post_recorded(review, body, approval, error="", at=at)


@transaction.atomic
def _post_recorded(review: Review, body: str, approval: ApprovalRequest, *, error: str, at: datetime) -> Review:
    current = _locked(review)
    if current.reply_body != body or current.reply_status not in (Status.PENDING_APPROVAL, Status.FAILED):
        return current  # another reply was proposed, or another worker recorded this one, meanwhile
    before = current.reply_status
    if error:
        current.reply_status, current.reply_error = Status.FAILED, error[:300]
    else:
        current.reply_status, current.reply_posted_at, current.reply_error = Status.POSTED, at, ""
    current.save(update_fields=["reply_status", "reply_posted_at", "reply_error"])
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=ACTOR,
        action="review.reply_failed" if error else "review.reply_posted",
        reason=error[:300] if error else f"approved in {approval.public_id}",
        before={"reply": before},
        after={"reply": current.reply_status, "chars": len(body)},
    )
    return current


def review_reply_retry(review: Review, *, actor: str) -> Review:
    """A person asks to post a reply that failed again (the same approved text)."""
    if review.reply_status != Status.FAILED or approved_reply(review) is None:
        raise ReplyRefused("only a reply that was approved and not posted can be posted again")
    receipt_write(
        business=review.business,
        lead=review.lead,
        subject=review.public_id,
        actor=actor,
        action="review.reply_retried",
        reason=review.reply_error,
    )
    return review_reply_post(review.pk)


def replies_post_due(*, limit: int = 20) -> int:
    """Approved replies still waiting to be posted (their enqueue was lost,
    or their worker died): posted now; returns how many were tried."""
    waiting = Review.objects.filter(reply_status=Status.PENDING_APPROVAL).exclude(reply_body="").order_by("pk")
    tried = 0
    for review in waiting[: limit * 5]:
        if tried >= limit:
            break
        if approved_reply(review) is not None:
            review_reply_post(review.pk)
            tried += 1
    return tried


def register() -> None:
    approval_edit_register(KIND, ReplyEdit)
    approval_handler_register(
        KIND,
        on_approved=_approved,
        on_rejected=_not_approved,
        on_expired=_not_approved,
        check=_check,
        recheck=_recheck,
    )
