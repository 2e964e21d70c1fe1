"""Ad spend as records: one pull of one ad account written at once, and the
manager told when a pull cannot be written.

A pull (agents.conversions.spend) reads every page of the platform's answer
first and hands the whole of it here: the campaigns' names, and each
(campaign, day) row replaced, in one transaction. A day the platform no
longer reports for the account (a campaign's cost credited back to nothing)
loses its row, so the pull of a period is what the platform says of it, and
pulling it again changes nothing. A refused pull writes no spend: its
receipt and, for what a person must fix (a refused token, an account billed
in another currency), an exception item for the manager.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction

from crm.models import Campaign, CampaignSpend, ConversionAccount
from crm.services.exceptions import manager_exception_open, manager_exceptions_resolve
from crm.services.receipts import receipt_write

# The manager's items: the platform refused the account's token; the account
# bills in a currency the business does not keep.
TOKEN_EXCEPTION = "spend_token"  # noqa: S105 - an exception kind, not a credential
CURRENCY_EXCEPTION = "spend_currency"
CENT = Decimal("0.01")


@dataclass(frozen=True)
class SpendRow:
    """One campaign's day as the platform reports it."""

    campaign_id: str
    name: str
    day: date
    cost: Decimal
    clicks: int
    impressions: int
    currency: str


@dataclass(frozen=True)
class SpendWritten:
    campaigns: int
    rows: int
    removed: int


def spend_rows_merge(rows: list[SpendRow]) -> list[SpendRow]:
    """One row per (campaign, day): a platform that splits a day (Meta's
    attribution rows, a campaign moved between accounts) is summed, the
    latest name kept. Cost rounded to the cent, half up."""
    merged: dict[tuple[str, date], SpendRow] = {}
    for row in rows:
        key = (row.campaign_id, row.day)
        seen = merged.get(key)
        if seen is not None:
            row = SpendRow(
                row.campaign_id,
                row.name or seen.name,
                row.day,
                seen.cost + row.cost,
                seen.clicks + row.clicks,
                seen.impressions + row.impressions,
                row.currency,
            )
        merged[key] = row
    return [
        SpendRow(
            r.campaign_id, r.name, r.day, r.cost.quantize(CENT, ROUND_HALF_UP), r.clicks, r.impressions, r.currency
        )
        for r in merged.values()
    ]


def campaign_spend_record(
    *,
    account: ConversionAccount,
    platform: str,
    account_id: str,
    since: date,
    until: date,
    rows: list[SpendRow],
    fetched_at: datetime,
    actor: str,
) -> SpendWritten:
    """Write one pull of `account_id` for the days since..until (inclusive):
    the campaigns (names current), every (campaign, day) replaced, the days
    in the period the answer leaves out removed, a receipt, and the
    account's open spend items resolved. One transaction, under the
    conversion account's row lock (two pulls of one account write one after
    the other). Raises ValueError, writing nothing, for a row in another
    currency than the business's or with a negative figure."""
    business = account.business
    rows = spend_rows_merge(rows)
    for row in rows:
        if row.currency != business.currency:
            raise ValueError(f"{row.currency} spend for a business that keeps {business.currency}")
        if row.cost < 0 or row.clicks < 0 or row.impressions < 0 or not row.campaign_id:
            raise ValueError(f"campaign {row.campaign_id!r} on {row.day}: not a spend the platform reports")
    with transaction.atomic():
        ConversionAccount.objects.select_for_update(no_key=True).filter(pk=account.pk).first()
        names: dict[str, str] = {}
        for row in sorted(rows, key=lambda r: r.day):
            names[row.campaign_id] = row.name or names.get(row.campaign_id, "")
        campaigns = Campaign.objects.bulk_create(
            [
                Campaign(
                    business=business,
                    platform=platform,
                    account_id=account_id,
                    campaign_id=campaign_id,
                    name=name[:300],
                    updated_at=fetched_at,
                )
                for campaign_id, name in sorted(names.items())
            ],
            update_conflicts=True,
            unique_fields=["business", "platform", "campaign_id"],
            update_fields=["account_id", "name", "updated_at"],
        )
        pks = {c.campaign_id: c.pk for c in campaigns}
        CampaignSpend.objects.bulk_create(
            [
                CampaignSpend(
                    business=business,
                    campaign_id=pks[row.campaign_id],
                    day=row.day,
                    cost_amount=row.cost,
                    currency=row.currency,
                    clicks=row.clicks,
                    impressions=row.impressions,
                    fetched_at=fetched_at,
                )
                for row in sorted(rows, key=lambda r: (r.campaign_id, r.day))
            ],
            update_conflicts=True,
            unique_fields=["campaign", "day"],
            update_fields=["cost_amount", "currency", "clicks", "impressions", "fetched_at"],
        )
        # Every row this pull wrote carries its fetched_at; an older one in the
        # period is a day the platform no longer reports.
        removed, _ = CampaignSpend.objects.filter(
            business=business,
            campaign__platform=platform,
            campaign__account_id=account_id,
            day__gte=since,
            day__lte=until,
            fetched_at__lt=fetched_at,
        ).delete()
        total = sum((row.cost for row in rows), Decimal("0.00"))
        receipt_write(
            business=business,
            actor=actor,
            action="spend.pulled",
            subject=account.public_id,
            reason=f"{platform} account {account_id}: {len(rows)} campaign days, {since} to {until}",
            after={"campaigns": len(pks), "rows": len(rows), "removed": removed, "cost": str(total)},
        )
        for kind in (TOKEN_EXCEPTION, CURRENCY_EXCEPTION):
            manager_exceptions_resolve(business_id=business.pk, kind=kind, subject=account.public_id, actor=actor)
    return SpendWritten(campaigns=len(pks), rows=len(rows), removed=removed)


def spend_pull_refused(*, account: ConversionAccount, kind: str, detail: str, actor: str) -> None:
    """A pull that wrote nothing, recorded: its receipt, and for a refused
    token or a foreign currency (`kind` one of the exception kinds; "" for a
    passing failure, tried again at the next run) the manager's item. One
    transaction."""
    with transaction.atomic():
        receipt_write(
            business=account.business,
            actor=actor,
            action="spend.pull_failed",
            subject=account.public_id,
            reason=detail[:500],
            after={"kind": kind or "failed"},
        )
        if kind:
            manager_exception_open(business_id=account.business_id, kind=kind, subject=account.public_id, detail=detail)
