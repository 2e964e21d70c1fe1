"""Read helpers behind the API: list filters, contact visibility, consent roll-up.

Visibility itself is decided in `crm.selectors`; the filters only narrow an
already scoped queryset by what a client typed, so a filter can never widen
what a user sees.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from crm.models import Business, Channel, ConsentStatus, Contact, ContactPoint, ContactPointKind, Lead
from crm.phones import email_normalize, phone_to_e164
from crm.selectors import lead_list_visible, scope_for

DEFAULT_REGION = "US"


def contact_list_visible(user: Any) -> QuerySet[Contact]:
    """Contacts of a user's full-view businesses, plus the contacts of the
    leads they may see (a setter sees the people behind their own leads)."""
    scope = scope_for(user)
    if scope.everything:
        return Contact.objects.all()
    # A subquery rather than a join on `leads`, so a contact with several
    # visible leads appears once.
    return Contact.objects.filter(
        Q(business_id__in=scope.full_business_ids) | Q(pk__in=lead_list_visible(user).values("contact_id"))
    )


def business_q(term: str, prefix: str = "business") -> Q:
    """A business named by its slug or its public id."""
    term = term.strip()
    return Q(**{f"{prefix}__slug": term}) | Q(**{f"{prefix}__public_id": term})


def phone_points_q(term: str, regions: set[str]) -> Q:
    """Phone points matching `term` typed in any format.

    A number without a country code means something different in each
    business's region, so it is read once per region and matched only
    against points of businesses in that region. A term no region can parse
    still matches a point kept as typed (an invalid phone).
    """
    q = Q()
    for region in sorted(regions or {DEFAULT_REGION}):
        e164 = phone_to_e164(term, region or DEFAULT_REGION)
        if e164:
            q |= Q(business__region=region, value=e164)
    if not q:
        q = Q(value=term.strip())
    return Q(kind=ContactPointKind.PHONE) & q


def lead_list_filter(
    leads: QuerySet[Lead],
    *,
    phone: str = "",
    email: str = "",
    stage: str = "",
    owner: str = "",
    business: str = "",
) -> QuerySet[Lead]:
    """Narrow visible leads by the list endpoint's query parameters; empty
    values are ignored."""
    if business:
        leads = leads.filter(business_q(business))
    if stage:
        leads = leads.filter(stage=stage)
    if owner:
        leads = leads.filter(owner__user__username=owner)
    if phone:
        # Only the regions of businesses the leads could be in: one small query.
        regions = set(
            Business.objects.filter(pk__in=leads.values("business_id")).values_list("region", flat=True).distinct()
        )
        points = ContactPoint.objects.filter(phone_points_q(phone, regions))
        leads = leads.filter(contact_id__in=points.values("contact_id"))
    if email:
        points = ContactPoint.objects.filter(kind=ContactPointKind.EMAIL, value=email_normalize(email))
        leads = leads.filter(contact_id__in=points.values("contact_id"))
    return leads


def consent_summary(points: list[ContactPoint]) -> dict[str, str]:
    """One consent value per channel over all of a contact's points.

    A revocation on any point wins for its channel (a person who said stop
    on one number said stop); otherwise any grant counts; otherwise unknown.
    Reads `consent_states` of each point, so prefetch them.
    """
    states = [state for point in points for state in point.consent_states.all()]
    summary: dict[str, str] = {}
    for channel in Channel.values:
        statuses = {state.status for state in states if state.channel == channel}
        if ConsentStatus.REVOKED in statuses:
            summary[channel] = ConsentStatus.REVOKED.value
        elif ConsentStatus.GRANTED in statuses:
            summary[channel] = ConsentStatus.GRANTED.value
        else:
            summary[channel] = ConsentStatus.UNKNOWN.value
    return summary
