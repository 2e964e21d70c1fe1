"""Pulling ad spend: for each of a business's conversion accounts on Google
Ads and Meta, the campaigns' cost per day, read from the platform and
written as `CampaignSpend` rows (crm.services.spend).

Which accounts: the active `ConversionAccount`s the business file already
configures for conversions — Google's `customer_id` and its credentials,
Meta's token and the ad account the file's `ad_account_id` names (a dataset
says nothing of the account that pays for the ads). A Meta account without
one is skipped, saying so.

Which days: the platforms restate recent days (late clicks, invalid-click
credits), so each run pulls the last DAILY_DAYS days, ending today in the
account's time zone; an account pulled for the first time gets FIRST_DAYS.
A pull reads every page before it writes anything, then writes the whole
period in one transaction: re-pulling a day replaces it.

A refused token or an account billed in another currency writes nothing,
leaves a `spend.pull_failed` receipt and opens an exception item for the
manager; a passing failure (a timeout, a 5xx) only the receipt, and the next
run's window covers the days again. A dry run (`dry_run=True`, `pull_spend
--dry-run`) reads the platform as a real pull does and writes nothing. Reads
change nothing at the platform, so CONVERSIONS_MODE=dry_run, which keeps
conversions from being sent, does not stop a pull.

It runs daily (job `leadops.spend_pull`), a bounded run: no account's pull
starts after JOB_BUDGET seconds, and the accounts pulled longest ago go first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Max
from django.utils import timezone

from agents.conversions.spend_base import CURRENCY, TOKEN, SpendRefused
from agents.conversions.spend_google import google_customer_id, google_spend_read
from agents.conversions.spend_meta import meta_ad_account_id, meta_spend_read
from crm.models import Campaign, CampaignSpend, ConversionAccount, ConversionPlatform, SpendPlatform
from crm.services.spend import (
    CURRENCY_EXCEPTION,
    TOKEN_EXCEPTION,
    SpendRow,
    campaign_spend_record,
    spend_pull_refused,
)

log = logging.getLogger(__name__)
ACTOR = "agent:spend"
FIRST_DAYS = 30
DAILY_DAYS = 3
MAX_DAYS = 400
# The job's share of its 80 s timeout: no account's pull starts after it
# (the rest go first tomorrow: the oldest-pulled accounts are taken first).
JOB_BUDGET = 50.0


@dataclass(frozen=True)
class Reader:
    platform: str  # SpendPlatform
    read: Callable[[ConversionAccount, date, date], list[SpendRow]]
    account_id: Callable[[ConversionAccount], str]


READERS: dict[str, Reader] = {
    ConversionPlatform.GOOGLE: Reader(SpendPlatform.GOOGLE_ADS, google_spend_read, google_customer_id),
    ConversionPlatform.META: Reader(SpendPlatform.META, meta_spend_read, meta_ad_account_id),
}
EXCEPTION_KINDS = {TOKEN: TOKEN_EXCEPTION, CURRENCY: CURRENCY_EXCEPTION}


@dataclass
class PullResult:
    business: str  # slug
    account: str  # the conversion account's public id
    platform: str
    # pulled | dry_run | refused (token or currency: a person acts) | failed (tried again) | skipped
    status: str
    since: date | None = None
    until: date | None = None
    campaigns: int = 0
    rows: int = 0
    removed: int = 0
    cost: Decimal = Decimal("0.00")
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, date | Decimal) else v for k, v in asdict(self).items()}


def spend_period(account: ConversionAccount, days: int | None) -> tuple[date, date]:
    """The days to pull, ending today in the account's zone: `days` of them,
    else DAILY_DAYS, or FIRST_DAYS for an account never pulled."""
    reader = READERS[account.platform]
    if days is None:
        known = Campaign.objects.filter(
            business_id=account.business_id, platform=reader.platform, account_id=reader.account_id(account)
        ).exists()
        days = DAILY_DAYS if known else FIRST_DAYS
    days = max(1, min(int(days), MAX_DAYS))
    zone = ZoneInfo(str(account.config.get("timezone") or account.business.timezone))
    today = timezone.now().astimezone(zone).date()
    return today - timedelta(days=days - 1), today


def spend_pull(account: ConversionAccount, *, days: int | None = None, dry_run: bool = False) -> PullResult:
    """Pull one account's spend for its period (`spend_period`) and write it,
    or record why not. The platform call is outside any transaction; the
    write is crm.services.spend's one transaction."""
    business = account.business
    result = PullResult(business.slug, account.public_id, account.platform, "skipped")
    reader = READERS.get(account.platform)
    if reader is None:
        result.detail = f"no spend reader for {account.platform}"
        return result
    account_id = reader.account_id(account)
    if not account_id:
        result.detail = (
            "no ad_account_id in the business file's conversions.meta: spend is not pulled"
            if account.platform == ConversionPlatform.META
            else "no customer_id: spend is not pulled"
        )
        return result
    since, until = spend_period(account, days)
    result.since, result.until = since, until
    try:
        rows = reader.read(account, since, until)
        foreign = sorted({row.currency for row in rows} - {business.currency})
        if foreign:
            raise SpendRefused(
                CURRENCY,
                f"the {account.get_platform_display()} account {account_id} bills in {', '.join(foreign)}; "
                f"{business.name} keeps {business.currency}: its spend is not recorded (never converted)",
            )
    except SpendRefused as exc:
        result.status = "refused" if exc.kind else "failed"
        result.detail = str(exc)
        if not dry_run:
            spend_pull_refused(account=account, kind=EXCEPTION_KINDS.get(exc.kind, ""), detail=str(exc), actor=ACTOR)
        log.warning("spend pull %s %s: %s", business.slug, account.public_id, exc)
        return result
    result.rows = len(rows)
    result.campaigns = len({row.campaign_id for row in rows})
    result.cost = sum((row.cost for row in rows), Decimal("0.00")).quantize(Decimal("0.01"))
    if dry_run:
        result.status, result.detail = "dry_run", "dry run: read, nothing written"
        return result
    written = campaign_spend_record(
        account=account,
        platform=reader.platform,
        account_id=account_id,
        since=since,
        until=until,
        rows=rows,
        fetched_at=timezone.now(),
        actor=ACTOR,
    )
    result.status, result.rows, result.campaigns, result.removed = (
        "pulled",
        written.rows,
        written.campaigns,
        written.removed,
    )
    return result


def spend_accounts(business_slug: str | None = None) -> list[ConversionAccount]:
    """The active Google and Meta accounts, those pulled longest ago first."""
    accounts = ConversionAccount.objects.filter(is_active=True, platform__in=list(READERS)).select_related("business")
    if business_slug:
        accounts = accounts.filter(business__slug=business_slug)
    found = list(accounts.order_by("business__slug", "platform"))
    pulled = CampaignSpend.objects.filter(business_id__in={a.business_id for a in found})
    last = {
        (row["business_id"], row["campaign__platform"]): row["at"]
        for row in pulled.values("business_id", "campaign__platform").annotate(at=Max("fetched_at"))
    }
    never = timezone.now() - timedelta(days=36500)
    return sorted(found, key=lambda a: last.get((a.business_id, READERS[a.platform].platform)) or never)


def spend_pull_all(
    *,
    business_slug: str | None = None,
    days: int | None = None,
    dry_run: bool = False,
    budget: float | None = None,
) -> list[PullResult]:
    """Every account's pull, one after the other; with a `budget` (seconds)
    none starts after it has run out."""
    started = time.monotonic()
    results = []
    for account in spend_accounts(business_slug):
        if budget is not None and time.monotonic() - started > budget:
            break
        results.append(spend_pull(account, days=days, dry_run=dry_run))
    return results


def spend_pull_due() -> dict[str, int]:
    """The daily job: every account, the last DAILY_DAYS days (FIRST_DAYS
    for a new one); the counts per outcome."""
    results = spend_pull_all(budget=JOB_BUDGET)
    counts: dict[str, int] = {"accounts": len(results), "rows": sum(r.rows for r in results)}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    return counts
