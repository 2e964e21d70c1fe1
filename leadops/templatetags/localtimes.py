"""`{{ text|local_times }}`: the times in stored text, shown in the reader's zone."""

from __future__ import annotations

from django import template

from crm.localtime import stored_times_localized

register = template.Library()


@register.filter
def local_times(text: str) -> str:
    return stored_times_localized(str(text))
