"""Invitations: how a new team member first gets in.

A member a business file (or an owner in the admin) adds has a user with no
usable password. `invitation_create` writes an `Invitation` row in the
caller's transaction; once it commits, `invitation_send` emails the member a
link to `/account/invitation/<uid>/<token>/`, where they set a password
(leadops.invitations). The row records what happened: sent, or why not (no
mail server, no address, the server's refusal), and, later, accepted.

The token is Django's password-reset token with a salt of its own, so a
reset link is no invitation and the other way round: it hashes the user's
password, last login and email, so it dies once the password is set (or the
address changes), and `INVITATION_HOURS` after it was made. A new invitation
does not kill an older link: until the password is set or its hours run out,
every link sent works, and all of them stop at the first use.

Where the operator runs single sign-on (`OIDC_ISSUER`), the email carries no
link: it says where to sign in.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import QuerySet
from django.shortcuts import resolve_url
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.encoding import force_bytes
from django.utils.http import base36_to_int, urlsafe_base64_decode, urlsafe_base64_encode
from django.utils.timesince import timesince

from crm.models import Invitation, TeamMember
from crm.services.on_commit import on_commit_once

logger = logging.getLogger(__name__)

# The backend of a server without EMAIL_URL (leadops.mail): it "sends" by
# logging that nothing was sent. An invitation through it is not sent.
_NOTHING_SENT_BACKEND = "leadops.mail.UnsentMailBackend"


class InvitationTokenGenerator(PasswordResetTokenGenerator):
    """Password-reset tokens under their own salt and lifetime."""

    key_salt = "leadops.crm.services.invitations.InvitationTokenGenerator"

    @property
    def timeout(self) -> int:
        return int(settings.INVITATION_HOURS) * 3600

    def check_token(self, user: Any, token: str | None) -> bool:
        # Django's check, with INVITATION_HOURS in place of PASSWORD_RESET_TIMEOUT.
        if not (user and token):
            return False
        try:
            ts_b36, _hash = token.split("-")
            timestamp = base36_to_int(ts_b36)
        except ValueError:
            return False
        if not any(
            constant_time_compare(self._make_token_with_timestamp(user, timestamp, secret), token)
            for secret in [self.secret, *self.secret_fallbacks]
        ):
            return False
        return self._num_seconds(self._now()) - timestamp <= self.timeout


invitation_tokens = InvitationTokenGenerator()


def sso_configured() -> bool:
    return bool(getattr(settings, "OIDC_ISSUER", ""))


def invitation_refusal(member: TeamMember) -> str | None:
    """Why this member gets no invitation (None: they may get one)."""
    user = member.user
    if not member.is_active or not user.is_active:
        return "not an active member"
    if user.is_superuser:
        return "an operator: they set their own password"
    if user.has_usable_password():
        return "already has a password"
    return None


def recipient_of(member: TeamMember) -> str:
    """Where the invitation goes: the user's own address. The membership's
    address only for someone on no other team: an owner of one business may
    edit it, and must not be able to send another business's member's link
    to themselves."""
    user = member.user
    if user.email:
        return str(user.email)
    if not TeamMember.objects.filter(user=user).exclude(pk=member.pk).exists():
        return member.email
    return ""


def invitation_create(member: TeamMember, *, sent_by: Any = None) -> Invitation:
    """A new invitation for `member`, sent once the caller's transaction
    commits (at once outside one). The row commits with the change that
    asked for it, so one never sent stays visible."""
    invitation = Invitation.objects.create(member=member, sent_by=sent_by)
    pk = invitation.pk

    def send() -> None:
        invitation_send(pk)

    on_commit_once(f"invitation:{pk}", send)
    return invitation


def invitation_link(user: Any) -> str:
    """A fresh set-password link for `user` (absolute, on PUBLIC_BASE_URL)."""
    uidb64 = urlsafe_base64_encode(force_bytes(user.pk))
    path = reverse("invitation", kwargs={"uidb64": uidb64, "token": invitation_tokens.make_token(user)})
    return settings.PUBLIC_BASE_URL + path


def login_link() -> str:
    return settings.PUBLIC_BASE_URL + resolve_url(settings.LOGIN_URL)


def invitation_send(invitation_id: int) -> Invitation:
    """Email one invitation and record the outcome on its row: `sent_at`, or
    `error` saying why not. Sending again what was sent sends nothing."""
    with transaction.atomic():
        # The row stays locked while it is sent: of the after-commit send and
        # the sweep racing for one invitation, the second finds it sent.
        invitation = (
            Invitation.objects.select_for_update(of=("self",))
            .select_related("member__user", "member__business", "sent_by")
            .get(pk=invitation_id)
        )
        if invitation.sent_at is not None:
            return invitation
        return _send_locked(invitation)


def _send_locked(invitation: Invitation) -> Invitation:
    member = invitation.member
    if refusal := invitation_refusal(member):
        return _unsent(invitation, refusal)
    if not (recipient := recipient_of(member)):
        return _unsent(invitation, "no email address: add one, or hand over the link from `manage.py invite`")
    if settings.EMAIL_BACKEND == _NOTHING_SENT_BACKEND:
        return _unsent(invitation, "no mail server (EMAIL_URL unset): hand over the link from `manage.py invite`")
    subject, body = invitation_message(invitation)
    try:
        send_mail(subject, body, None, [recipient])
    except Exception as exc:  # noqa: BLE001 (any backend's failure: refused, timed out, unreachable)
        logger.warning("invitation %s not sent: %s", invitation.public_id, type(exc).__name__)
        return _unsent(invitation, f"the mail server refused it: {type(exc).__name__}: {exc}")
    return invitation_mark_sent(invitation)


def invitation_mark_sent(invitation: Invitation) -> Invitation:
    """The invitation reached its member (by email, or by hand from the command)."""
    invitation.sent_at, invitation.error = timezone.now(), ""
    Invitation.objects.filter(pk=invitation.pk).update(sent_at=invitation.sent_at, error="")
    return invitation


def _unsent(invitation: Invitation, reason: str) -> Invitation:
    invitation.error = reason[:300]
    Invitation.objects.filter(pk=invitation.pk).update(error=invitation.error)
    return invitation


def invitation_message(invitation: Invitation) -> tuple[str, str]:
    """The subject and plain-text body of an invitation email."""
    member = invitation.member
    business = member.business
    inviter = invitation.sent_by
    context = {
        "name": member.display_name or member.user.get_username(),
        "username": member.user.get_username(),
        "business": business.name,
        "role": member.get_role_display().lower(),
        "inviter": (inviter.get_full_name() or inviter.get_username()) if inviter else "",
        "sso": sso_configured(),
        "link": "" if sso_configured() else invitation_link(member.user),
        "login_link": login_link(),
        "hours": settings.INVITATION_HOURS,
    }
    subject = f"Your LeadOps sign-in for {business.name}"
    return subject, render_to_string("crm/invitation_email.txt", context)


def invitation_user(uidb64: str, token: str, *, lock: bool = False) -> Any:
    """The user a link names, if the link still works: its token is theirs
    and fresh, and they are an active member somewhere. None otherwise.
    `lock` (inside a transaction): the user's row stays locked, so two posts
    of one link set one password."""
    user_model = get_user_model()
    users = user_model._default_manager.select_for_update() if lock else user_model._default_manager
    try:
        pk = urlsafe_base64_decode(uidb64).decode()
        user = users.get(pk=pk)
    except (TypeError, ValueError, OverflowError, UnicodeDecodeError, user_model.DoesNotExist):
        return None
    if not invitation_tokens.check_token(user, token) or not user.is_active or user.is_superuser:
        return None
    if not TeamMember.objects.filter(user=user, is_active=True).exists():
        return None
    return user


def invitation_accept(user: Any) -> None:
    """The member set their password through a link: every invitation of
    theirs that went out is accepted, and they may sign in to the back
    office (the admin's login, the workspace and the back office's pages all
    ask for `is_staff`; what they may see there is their role's)."""
    Invitation.objects.filter(member__user=user, accepted_at__isnull=True, sent_at__isnull=False).update(
        accepted_at=timezone.now()
    )
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])


def invitations_unsent() -> QuerySet[Invitation]:
    """What a sweep sends again: never sent, to someone who still cannot sign in."""
    # An unusable password is "!" and random characters (UNUSABLE_PASSWORD_PREFIX).
    cannot_sign_in = {"member__user__password__startswith": UNUSABLE_PASSWORD_PREFIX}
    return Invitation.objects.filter(sent_at__isnull=True, member__is_active=True, **cannot_sign_in).order_by(
        "created_at"
    )


def invitations_sweep(*, now: Any = None, limit: int = 50) -> dict[str, int]:
    """Send again what never went out (the mail server was down, or the
    after-commit send was lost with its process), while its link would still
    work; older ones stay on the team page as not sent, for a new invitation.
    Rows of the last minutes are left to their after-commit send."""
    now = now or timezone.now()
    window = (now - timedelta(hours=int(settings.INVITATION_HOURS)), now - timedelta(minutes=5))
    due = list(invitations_unsent().filter(created_at__range=window).values_list("pk", flat=True)[:limit])
    sent = sum(invitation_send(pk).sent_at is not None for pk in due)
    return {"tried": len(due), "sent": sent}


def invitation_status(member: TeamMember, invitations: list[Invitation], now: Any = None) -> str:
    """The member's invitation in words, for the team page: `invitations`
    are theirs, newest first (prefetched for a whole page)."""
    now = now or timezone.now()
    accepted = next((i for i in invitations if i.accepted_at), None)
    if accepted is not None and accepted.accepted_at is not None:
        return f"accepted {timesince(accepted.accepted_at, now, depth=1)} ago"
    if member.user.has_usable_password():
        return "has a password"
    if not invitations:
        return "not invited"
    latest = invitations[0]
    if latest.sent_at is None:
        return f"not sent: {latest.error}" if latest.error else "sending"
    ago = timesince(latest.sent_at, now, depth=1)
    if sso_configured():
        return f"invited {ago} ago (single sign-on)"
    if (now - latest.sent_at).total_seconds() > invitation_tokens.timeout:
        return f"expired (sent {ago} ago)"
    return f"invited {ago} ago"
