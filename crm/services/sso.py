"""Single sign-on: who a provider's claims sign in, and the teams they are on.

The provider (OpenID Connect, leadops.oidc) proves who someone is; this
module decides whether that signs anyone in to LeadOps, as whom, and on
which teams. `sso_sign_in` finds the user by one claim (their email by
default, their username otherwise) and, with a role claim configured, makes
their memberships the claim's: each "business-slug:role" whose business
exists is created, given its role or switched back on; every other active
membership of theirs is switched off (never deleted: their leads, tasks and
receipts keep pointing at it). Without a role claim, LeadOps keeps the
roles (business files, invitations, the team page) and the provider only
says who signs in.

Refused, with a reason the login page shows: a claim set naming no business
the person is on (no user is made for them), an operator's account (a
superuser signs in with their password, never through the provider), a user
switched off in LeadOps, an address the provider says it has not verified,
and a claim that matches two users. A user signed in is staff (the back
office asks for it) and never a superuser; what they see there is their
role's. Every membership change writes a receipt on its business.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction

from crm.models import Business, Role, TeamMember
from crm.services.invitations import invitation_accept
from crm.services.receipts import receipt_write
from crm.validation import name_refusal

logger = logging.getLogger(__name__)

# What the login page says when the claims name no team to sign in to.
NO_TEAM = "Your sign-in names no LeadOps team you are on. Ask your administrator to give you a LeadOps role."


@dataclass
class SsoSignIn:
    """The outcome: the user signed in, or why nobody is (`refusal`)."""

    user: Any = None
    refusal: str = ""
    # What changed, for the log ("acme: added as setter").
    changes: list[str] = field(default_factory=list)


def role_claim_read(value: Any) -> tuple[dict[str, str], list[str]]:
    """{business slug: role} from a role claim ("acme:owner" strings; one
    string alone is taken as a list of one), and each entry ignored, with why.
    A business named twice with different roles is ignored: guessing which
    one the provider meant could hand someone an owner's rights."""
    entries = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    wanted: dict[str, str] = {}
    ignored: list[str] = []
    conflicting: set[str] = set()
    for entry in entries:
        slug, sep, role = str(entry).strip().lower().partition(":")
        if not sep or not slug or role not in Role.values:
            ignored.append(f"{entry!r}: not business-slug:role with a role of {', '.join(Role.values)}")
            continue
        if wanted.get(slug, role) != role:
            conflicting.add(slug)
        wanted[slug] = role
    for slug in sorted(conflicting):
        del wanted[slug]
        ignored.append(f"{slug!r}: named with two different roles")
    return wanted, ignored


def _refused(reason: str, claims_said: str) -> SsoSignIn:
    logger.warning("single sign-on refused (%s): %s", claims_said, reason)
    return SsoSignIn(refusal=reason)


def sso_sign_in(claims: Mapping[str, Any], *, issuer: str, match_claim: str, role_claim: str) -> SsoSignIn:
    """Sign-in for a provider's verified claims: the user (found or made)
    with their memberships made the role claim's, or a refusal.

    One transaction, holding the user's row locked: two sign-ins of one
    person (two tabs) apply their claims one after the other. Memberships a
    refusal switched off stay off (the claim said they ended)."""
    identity = str(claims.get(match_claim) or "").strip()
    said = f"{match_claim} {_masked(identity)}"
    if not identity:
        return _refused(f"Your sign-in did not say your {match_claim}; LeadOps finds your account by it.", said)
    if claims.get("email_verified") in (False, "false"):
        return _refused("Your provider has not verified your email address.", said)
    wanted: dict[str, str] | None = None
    if role_claim:
        wanted, ignored = role_claim_read(claims.get(role_claim, []))
        for problem in ignored:
            logger.warning("single sign-on (%s): %s entry ignored: %s", said, role_claim, problem)
    actor = f"sso:{issuer.split('://', 1)[-1].split('/', 1)[0]}"[:150]

    with transaction.atomic():
        businesses = {b.slug: b for b in Business.objects.filter(slug__in=wanted)} if wanted else {}
        if wanted:
            for slug in sorted(set(wanted) - set(businesses)):
                logger.warning("single sign-on (%s): no business %r", said, slug)
        users = list(_users_matching(match_claim, identity)[:2])
        if len(users) > 1:
            return _refused("Two LeadOps accounts share this sign-in: ask your administrator to merge them.", said)
        if users:
            user = users[0]
        elif not businesses:
            # Nobody is made for a sign-in that could open nothing.
            return _refused(NO_TEAM, said)
        else:
            made = _user_create(claims, match_claim, identity)
            if made is None:
                return _refused("An account with this name exists under another address: ask your administrator.", said)
            user = made
        if user.is_superuser:
            return _refused("This is an operator's account: it signs in with its password, not single sign-on.", said)
        if not user.is_active:
            return _refused("This account is switched off in LeadOps.", said)
        outcome = SsoSignIn(user=user)
        if wanted is not None:
            chosen = {slug: (businesses[slug], wanted[slug]) for slug in businesses}
            _memberships_apply(outcome, chosen, actor=actor, claim=role_claim, name=_display_name(user, claims))
        if not TeamMember.objects.filter(user=user, is_active=True).exists():
            outcome.user, outcome.refusal = None, NO_TEAM
        else:
            _user_update(user, claims)
            # Their invitations (if any) are accepted: this was the sign-in they announced.
            invitation_accept(user)
        _groups_sync(user)
    if outcome.changes:
        logger.info("single sign-on (%s) changed: %s", said, "; ".join(outcome.changes))
    if outcome.refusal:
        logger.warning("single sign-on refused (%s): %s", said, outcome.refusal)
    return outcome


def _masked(identity: str) -> str:
    """Enough of who it was for the operator to recognise ("s***@acme.example"),
    not the address itself: logs are kept and shipped where receipts' personal
    values are not."""
    name, at, domain = identity.partition("@")
    return f"{name[:1]}***{at}{domain}"


def _users_matching(match_claim: str, identity: str) -> Any:
    users = get_user_model()._default_manager.select_for_update()
    if match_claim == "email":
        return users.filter(email__iexact=identity).order_by("pk")
    return users.filter(username__iexact=identity).order_by("pk")


def _user_create(claims: Mapping[str, Any], match_claim: str, identity: str) -> Any:
    """A new user named after the sign-in (no password: they sign in through
    the provider); None when that username is taken by someone the claim did
    not match (another address)."""
    user_model = get_user_model()
    username = identity[:150]
    if user_model._default_manager.filter(username__iexact=username).exists():
        return None
    email = identity if match_claim == "email" else str(claims.get("email") or "")
    user = user_model(username=username, email=email, is_staff=True)
    user.set_unusable_password()
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        # The same person's first sign-in in another tab made them a moment
        # ago (the insert waited for that commit): theirs, if it is them.
        return _users_matching(match_claim, identity).first()
    return user


def _user_update(user: Any, claims: Mapping[str, Any]) -> None:
    changed = []
    for attr, claim in (("first_name", "given_name"), ("last_name", "family_name")):
        value = str(claims.get(claim) or "")[:150]
        if value and getattr(user, attr) != value:
            setattr(user, attr, value)
            changed.append(attr)
    if not user.email and claims.get("email"):
        user.email, changed = str(claims["email"]), [*changed, "email"]
    if changed:
        user.save(update_fields=changed)


def _display_name(user: Any, claims: Mapping[str, Any]) -> str:
    """The name a new membership shows: the provider's, unless it is no
    name to show customers (crm.validation), then the username."""
    name = str(claims.get("name") or "").strip()[:200]
    return name if name and name_refusal(name) is None else user.get_username()


def _memberships_apply(
    outcome: SsoSignIn, wanted: dict[str, tuple[Business, str]], *, actor: str, claim: str, name: str
) -> None:
    """The user's memberships made the claim's, a receipt for each change."""
    user = outcome.user
    reason = f"single sign-on: the {claim} claim"
    held = {
        m.business_id: m for m in TeamMember.objects.select_for_update().filter(user=user).select_related("business")
    }
    for slug, (business, role) in sorted(wanted.items()):
        member = held.get(business.pk)
        if member is None:
            member = TeamMember(
                business=business,
                user=user,
                role=role,
                display_name=name,
            )
            member.full_clean()
            member.save()
            _receipt(member, actor, "team.member_added", reason, {}, {"role": role, "is_active": True})
            outcome.changes.append(f"{slug}: added as {role}")
            continue
        before = {"role": member.role, "is_active": member.is_active}
        if before == {"role": role, "is_active": True}:
            continue
        member.role, member.is_active = role, True
        member.save(update_fields=["role", "is_active"])
        _receipt(member, actor, "team.member_changed", reason, before, {"role": role, "is_active": True})
        outcome.changes.append(f"{slug}: {before['role']}{'' if before['is_active'] else ' (off)'} -> {role}")
    kept = {business.pk for business, _role in wanted.values()}
    for member in held.values():
        if member.business_id not in kept and member.is_active:
            member.is_active = False
            member.save(update_fields=["is_active"])
            _receipt(
                member,
                actor,
                "team.member_changed",
                f"{reason} no longer names this business",
                {"role": member.role, "is_active": True},
                {"role": member.role, "is_active": False},
            )
            outcome.changes.append(f"{member.business.slug}: switched off")


def _receipt(
    member: TeamMember, actor: str, action: str, reason: str, before: dict[str, Any], after: dict[str, Any]
) -> None:
    receipt_write(
        business=member.business,
        actor=actor,
        action=action,
        subject=member.public_id,
        reason=reason,
        before=before,
        after=after,
    )


def _groups_sync(user: Any) -> None:
    """The user's role groups are the roles of their active memberships
    (crm.roles: shown on Django's user page, never asked for a permission)."""
    roles = set(TeamMember.objects.filter(user=user, is_active=True).values_list("role", flat=True))
    groups = {group.name: group for group in Group.objects.filter(name__in=Role.values)}
    held = set(user.groups.filter(name__in=Role.values).values_list("name", flat=True))
    if held != roles:
        user.groups.remove(*(groups[name] for name in held - roles if name in groups))
        user.groups.add(*(groups[name] for name in roles - held if name in groups))
