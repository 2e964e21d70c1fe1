"""The review request's short link: `/r/<token>/`, public (it is what the
customer taps in the text), counted, then sent on to the review page.

A HEAD is answered without counting: link previews and uptime checkers ask
with it, and a preview is not a customer's tap. Nothing else about the
request is shown: the token names a redirect, not a record."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from agents.reviews.requests import review_link_follow


@never_cache
@require_safe
def review_link(request: HttpRequest, token: str) -> HttpResponse:
    destination = review_link_follow(token, now=timezone.now(), count=request.method == "GET")
    if destination is None:
        raise Http404("no such link")
    return HttpResponseRedirect(destination)


urlpatterns = [path("r/<str:token>/", review_link, name="review-link")]
