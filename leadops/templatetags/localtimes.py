"""`{{ text|local_times }}`: stored text's UTC times shown in the reader's zone."""

from __future__ import annotations

from django import template

from crm.localtime import utc_text_localized

register = template.Library()


@register.filter
def local_times(text: str) -> str:
    return utc_text_localized(str(text))
