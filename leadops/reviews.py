"""Google reviews in the back office.

- `/admin/reviews/` (owners and managers, as SMS health): the last 30 days'
  figures (requests sent, clicked, reviews, matched:
  agents.reviews.requests.review_figures), the Google connection and its
  location, then each review — who, stars, when (in the viewer's zone),
  what they wrote, the lead it was matched to, the reply's state — with a
  reply form prefilled from the playbook (agents.reviews.replies), and the
  replies waiting for a decision, each linked to its approval.
- `POST /admin/reviews/<id>/reply/`: a person proposes a reply; it waits for
  another person's approval (never posted on the proposer's say).
- `POST /admin/reviews/<id>/retry/`: an approved reply Google did not take,
  posted again.
- `POST /admin/reviews/location/` (owners, as connecting): the location
  whose reviews are read, when the Google account has several.

Thin views over agents/reviews: each parses, asks `crm.permissions`, calls
one service and redirects back with what happened.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_POST

from agents.reviews.google_business import PROVIDER, REPLY_MAX_BYTES
from agents.reviews.pull import connection_of, location_choices, location_choose, location_of, pulled_at
from agents.reviews.replies import (
    KIND,
    ReplyRefused,
    approved_reply,
    reply_drafts,
    review_reply_propose,
    review_reply_retry,
)
from agents.reviews.requests import review_figures
from approvals.models import ApprovalRequest
from crm.figures import Figure, before_words, figure
from crm.models import Business, Review
from crm.permissions import business_ids_where, can, can_anywhere
from leadops.charts import bar_chart

PERIOD = timedelta(days=30)
SHOWN = 100
# Who reads the reviews page and proposes replies: a business's owners and
# managers, as for SMS health (the figures are the business's results).
READ = "money.view"


class ReplyForm(forms.Form):
    body = forms.CharField(max_length=REPLY_MAX_BYTES, strip=True, error_messages={"required": "write the reply"})


def _businesses(request: HttpRequest) -> Any:
    if not can_anywhere(request.user, "report.view") or not can_anywhere(request.user, READ):
        raise PermissionDenied("reviews are for the owners and managers of a business")
    allowed = business_ids_where(request.user, READ)
    businesses = Business.objects.order_by("name")
    return businesses if allowed is None else businesses.filter(pk__in=allowed)


def _back(business: Business) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("reviews") + f"?business={business.slug}")


def _review(request: HttpRequest, public_id: str) -> Review:
    review = Review.objects.select_related("business", "lead").filter(public_id=public_id).first()
    if review is None or not can(request.user, READ, review.business_id):
        raise PermissionDenied("only the business's owners and managers answer its reviews")
    return review


@staff_member_required
@require_GET
def reviews_page(request: HttpRequest) -> HttpResponse:
    businesses = _businesses(request)
    chosen = businesses.filter(slug=request.GET.get("business", "")).first() or businesses.first()
    if chosen is None:
        raise PermissionDenied("no business of yours")
    now = timezone.now()
    reviews = list(Review.objects.filter(business=chosen).select_related("lead__contact")[:SHOWN])
    drafts = reply_drafts(chosen, reviews)
    waiting = {
        str(a.payload.get("review")): a
        for a in ApprovalRequest.objects.filter(business=chosen, kind=KIND, status=ApprovalRequest.Status.PENDING)
    }
    rows = [
        {
            "review": r,
            "draft": drafts[r.pk],
            "approval": waiting.get(r.public_id),
            "retry": r.reply_status == Review.ReplyStatus.FAILED and approved_reply(r) is not None,
        }
        for r in reviews
    ]
    connection = connection_of(chosen)
    return render(
        request,
        "leadops/compliance/reviews.html",
        {
            "title": f"Reviews — {chosen.name}",
            "business": chosen,
            "businesses": businesses,
            "since": now - PERIOD,
            "until": now,
            "figures": review_headlines(chosen, now),
            "chart": stars_chart(chosen, since=now - PERIOD, until=now),
            "connection": connection,
            "location": location_of(connection) if connection else None,
            "pulled_at": pulled_at(connection) if connection else None,
            "choices": location_choices(connection) if connection else [],
            "may_connect": can(request.user, "sync.connect", chosen.pk),
            "provider": PROVIDER,
            "rows": rows,
            "pending": [row for row in rows if row["approval"] is not None],
        },
    )


@staff_member_required
@require_POST
def reply_propose_view(request: HttpRequest, public_id: str) -> HttpResponse:
    review = _review(request, public_id)
    form = ReplyForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(str(e) for errors in form.errors.values() for e in errors))
        return _back(review.business)
    try:
        approval = review_reply_propose(review, form.cleaned_data["body"], user=request.user)
    except ReplyRefused as exc:
        messages.error(request, f"Not proposed: {exc}.")
        return _back(review.business)
    messages.success(request, f"Your reply waits for another owner or manager to approve it ({approval.public_id}).")
    return _back(review.business)


@staff_member_required
@require_POST
def reply_retry_view(request: HttpRequest, public_id: str) -> HttpResponse:
    review = _review(request, public_id)
    try:
        review = review_reply_retry(review, actor=request.user.get_username())
    except ReplyRefused as exc:
        messages.error(request, f"Not posted: {exc}.")
        return _back(review.business)
    if review.reply_status == Review.ReplyStatus.POSTED:
        messages.success(request, "The reply is on Google now.")
    else:
        messages.error(request, f"Google did not take the reply again: {review.reply_error}")
    return _back(review.business)


@staff_member_required
@require_POST
def location_choose_view(request: HttpRequest) -> HttpResponse:
    business = Business.objects.filter(slug=request.POST.get("business", "")).first()
    if business is None or not can(request.user, "sync.connect", business.pk):
        raise PermissionDenied("only an owner of the business chooses its Google location")
    connection = connection_of(business)
    if connection is None:
        messages.error(request, "Connect Google Business Profile first.")
        return _back(business)
    try:
        chosen = location_choose(connection, request.POST.get("location", ""), actor=request.user.get_username())
    except ValueError as exc:
        messages.error(request, str(exc))
        return _back(business)
    messages.success(request, f"Reviews of {chosen.title or chosen.name} are read from now on.")
    return _back(business)


def review_headlines(business: Business, now: datetime) -> list[Figure]:
    """The period's four figures against the 30 days before, by the same
    `review_figures` (two queries each)."""
    now_figures = review_figures(business, since=now - PERIOD, until=now)
    before = review_figures(business, since=now - 2 * PERIOD, until=now - PERIOD)
    against = before_words(PERIOD)
    return [
        figure(key, label, getattr(now_figures, key), (getattr(before, key), against))
        for key, label in (
            ("sent", "Requests sent"),
            ("clicked_requests", "Links clicked"),
            ("reviews", "Reviews"),
            ("reviews_matched", "Matched to a request"),
        )
    ]


def stars_chart(business: Business, *, since: datetime, until: datetime) -> SafeString:
    """The period's reviews by their stars, five to one (one grouped query)."""
    counts = dict(
        Review.objects.filter(business=business, posted_at__gte=since, posted_at__lt=until, rating__isnull=False)
        .values_list("rating")
        .annotate(n=Count("pk"))
        .order_by()
    )
    if not counts:
        return bar_chart([], chart_id="stars-chart", title="Reviews by stars")
    bars = []
    for stars in range(5, 0, -1):
        n = counts.get(stars, 0)
        bars.append((f"{stars} stars" if stars > 1 else "1 star", float(n), str(n)))
    return bar_chart(bars, chart_id="stars-chart", title="Reviews by stars, last 30 days", color="#c28a00")
