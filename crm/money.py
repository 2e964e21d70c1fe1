"""Money as people read it: in the business's currency and its country's
way of writing numbers ("$12,400", "CA$980.50"), by CLDR's rules (Babel).

Amounts stay Decimal everywhere else; this is only how a page or an email
shows one. Headline figures drop the cents (`whole=True`: "$12,400"); tables
keep them.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from babel.numbers import format_currency

# The language the product is written in; the business's region picks the
# grouping and the currency sign ("en_US": $12,400; "en_CA": US$12,400).
LANGUAGE = "en"


def money_locale(region: str) -> str:
    return f"{LANGUAGE}_{(region or 'US').upper()}"


def money_text(amount: Decimal | int | None, currency: str, *, region: str = "US", whole: bool = False) -> str:
    """`amount` written for a person; "—" when there is none."""
    if amount is None:
        return "—"
    value = Decimal(amount)
    if whole:
        value = value.quantize(Decimal("1"), rounding=ROUND_HALF_UP)
        return format_currency(value, currency, locale=money_locale(region), format="¤#,##0", currency_digits=False)
    return format_currency(value, currency, locale=money_locale(region))
