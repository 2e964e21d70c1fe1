"""A real HTTP server standing in for Google's OAuth endpoints and the three
Business Profile APIs reviews use, in their shapes, for the reviews tests
(tests/helpers/google_business.py). Our adapter reaches it through
GOOGLE_OAUTH_URL, GOOGLE_TOKEN_URL and GOOGLE_BUSINESS_{ACCOUNTS,INFO,REVIEWS}_URL,
all three bases this one server; nothing of ours is replaced.

- `GET /o/oauth2/v2/auth`, `POST /token`: the OAuth flow
  (devtools/simulator/oauth_stand_in.py); Google keeps the refresh token;
  `revoke()` makes every token refused (`invalid_grant`, 401 on the APIs).
- `GET /v1/accounts` (Account Management), `GET /v1/{account}/locations`
  (Business Information, with `readMask`), `GET /v4/{account}/{location}/reviews`
  (`pageSize` at most 50, `pageToken`, newest first, `averageRating`,
  `totalReviewCount`), `PUT /v4/{review}/reply` (`{"comment"}`; the reply made
  or replaced). A bad bearer token is 401 in Google's error shape.

`review_add` and `review_edit` write reviews as customers would;
`fail_replies` makes the reply PUT answer that status. Every API request is
kept in `seen`; every reply PUT's body in `replies_put`.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from django.utils import timezone

from devtools.simulator.oauth_stand_in import OAuthStandIn

CLIENT_ID = "gbp-client-id.apps.googleusercontent.com"
CLIENT_SECRET = "gbp-client-secret-0123456789"  # noqa: S105 - the stand-in app's own, public
ACCOUNT = "accounts/1029384756"
LOCATION = "locations/5647382910"
STARS = ("", "ONE", "TWO", "THREE", "FOUR", "FIVE")
MAX_PAGE = 50


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _error(status: int, message: str, code: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": code}}


class GoogleBusinessServer(OAuthStandIn):
    client_id = CLIENT_ID
    client_secret = CLIENT_SECRET
    authorize_path = "/o/oauth2/v2/auth"
    token_path = "/token"  # noqa: S105 - a path, not a secret
    api_prefix = ""
    unauthorized: ClassVar[dict[str, Any]] = _error(
        401, "Request had invalid authentication credentials.", "UNAUTHENTICATED"
    )
    revoked_description = "Token has been expired or revoked."
    code_answer_extra: ClassVar[dict[str, str]] = {"scope": "https://www.googleapis.com/auth/business.manage"}

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self.accounts: list[dict[str, Any]] = [
            {"name": ACCOUNT, "accountName": "Acme Heating & Air", "type": "PERSONAL"}
        ]
        self.locations: dict[str, list[dict[str, Any]]] = {ACCOUNT: [{"name": LOCATION, "title": "Acme Heating & Air"}]}
        # location parent -> its reviews, in the order written
        self.reviews: dict[str, list[dict[str, Any]]] = {}
        self.replies_put: list[tuple[str, str]] = []
        self.fail_replies = 0  # an HTTP status for every reply PUT; 0: answered
        self.clock = timezone.now()

    # -- what customers and owners do there
    def review_add(
        self,
        reviewer: str,
        stars: int,
        comment: str = "",
        *,
        at: datetime | None = None,
        parent: str = f"{ACCOUNT}/{LOCATION}",
        anonymous: bool = False,
        reply: str = "",
    ) -> str:
        """A review as a customer writes it; its name."""
        with self.lock:
            review_id = secrets.token_urlsafe(12).replace("-", "x").replace("_", "y")
            written = rfc3339(at or self.clock)
            review: dict[str, Any] = {
                "name": f"{parent}/reviews/{review_id}",
                "reviewId": review_id,
                "reviewer": {"displayName": reviewer, "isAnonymous": anonymous},
                "starRating": STARS[stars],
                "createTime": written,
                "updateTime": written,
            }
            if comment:
                review["comment"] = comment
            if reply:
                review["reviewReply"] = {"comment": reply, "updateTime": written}
            self.reviews.setdefault(parent, []).append(review)
            return str(review["name"])

    def review_edit(self, name: str, *, stars: int, comment: str, at: datetime) -> None:
        with self.lock:
            review = self._review(name)
            assert review is not None, name
            review.update(starRating=STARS[stars], comment=comment, updateTime=rfc3339(at))

    def reply_of(self, name: str) -> str:
        with self.lock:
            review = self._review(name) or {}
            return str((review.get("reviewReply") or {}).get("comment") or "")

    def _review(self, name: str) -> dict[str, Any] | None:
        # Called under the lock.
        parent = name.rsplit("/reviews/", 1)[0]
        return next((r for r in self.reviews.get(parent, []) if r["name"] == name), None)

    # -- the APIs
    def _api(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            if (method, path) == ("GET", "/v1/accounts"):
                return 200, {"accounts": self.accounts}
            if method == "GET" and path.startswith("/v1/accounts/") and path.endswith("/locations"):
                account = path.removeprefix("/v1/").removesuffix("/locations")
                if "readMask" not in query:
                    return 400, _error(400, "Request contains an invalid argument: read_mask", "INVALID_ARGUMENT")
                if account not in self.locations:
                    return 404, _error(404, "Requested entity was not found.", "NOT_FOUND")
                return 200, {"locations": self.locations[account]}
            if method == "GET" and path.startswith("/v4/") and path.endswith("/reviews"):
                return self._reviews_list(path.removeprefix("/v4/").removesuffix("/reviews"), query)
            if method == "PUT" and path.startswith("/v4/") and path.endswith("/reply"):
                return self._reply(path.removeprefix("/v4/").removesuffix("/reply"), body)
        return 404, _error(404, "Requested entity was not found.", "NOT_FOUND")

    def _reviews_list(self, parent: str, query: dict[str, str]) -> tuple[int, Any]:
        if parent not in {f"{a}/{loc['name']}" for a, locs in self.locations.items() for loc in locs}:
            return 404, _error(404, "Requested entity was not found.", "NOT_FOUND")
        size = min(int(query.get("pageSize") or MAX_PAGE), MAX_PAGE)
        rows = sorted(self.reviews.get(parent, []), key=lambda r: r["createTime"], reverse=True)
        start = int(query.get("pageToken") or 0)
        answer: dict[str, Any] = {"reviews": rows[start : start + size], "totalReviewCount": len(rows)}
        if rows:
            stars = [STARS.index(r["starRating"]) for r in rows]
            answer["averageRating"] = round(sum(stars) / len(stars), 1)
        if start + size < len(rows):
            answer["nextPageToken"] = str(start + size)
        return 200, answer

    def _reply(self, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.replies_put.append((name, str(body.get("comment") or "")))
        if self.fail_replies:
            return self.fail_replies, _error(self.fail_replies, "The service is currently unavailable.", "UNAVAILABLE")
        review = self._review(name)
        if review is None:
            return 404, _error(404, "Requested entity was not found.", "NOT_FOUND")
        if not body.get("comment"):
            return 400, _error(400, "Request contains an invalid argument.", "INVALID_ARGUMENT")
        self.clock += timedelta(seconds=1)
        reply = {"comment": body["comment"], "updateTime": rfc3339(self.clock)}
        review["reviewReply"] = reply
        return 200, reply
