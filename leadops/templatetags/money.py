"""`{{ amount|money:currency }}`: money as people read it ("$12,400.00",
"CA$980.50"), by CLDR's rules (crm/money.py); "—" for none."""

from __future__ import annotations

from decimal import Decimal

from django import template

from crm.money import money_text

register = template.Library()


@register.filter
def money(amount: Decimal | int | None, currency: str = "USD") -> str:
    return money_text(amount, currency or "USD")
