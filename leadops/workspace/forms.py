"""The workspace's forms: the inbox's filters (a GET form) and each action
on a thread (POST forms that work without JavaScript)."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms

from agents.playbook.copilot import REPLY_CHANNELS
from crm.inbox import InboxQuery
from crm.models import INTENTS, Stage, TeamMember
from crm.permissions import SALES
from crm.services.reached import CALL_OUTCOMES

INBOX_CHANNELS = [
    ("", "Any channel"),
    ("sms", "SMS"),
    ("instagram", "Instagram DM"),
    ("thumbtack", "Thumbtack"),
    ("yelp", "Yelp"),
    ("email", "Email"),
    ("voice", "Voice"),
]
INBOX_INTENTS = [("", "Any intent"), *((i, i.replace("_", " ").capitalize()) for i in INTENTS)]
INBOX_SORTS = [("", "Needs a person first"), ("intent", "By intent")]
INBOX_STAGES = [("", "Open"), ("all", "Any stage"), *((s.value, s.label.replace("_", " ")) for s in Stage)]
CALL_WORDS = {
    "connected": "Talked to them",
    "voicemail": "Left a voicemail",
    "no_answer": "No answer",
    "busy": "Busy",
    "wrong_number": "Wrong number",
}


class InboxFilterForm(forms.Form):
    who = forms.ChoiceField(required=False)
    needs_reply = forms.BooleanField(required=False, label="Needs reply")
    channel = forms.ChoiceField(required=False, choices=INBOX_CHANNELS)
    stage = forms.ChoiceField(required=False, choices=INBOX_STAGES)
    source = forms.ChoiceField(required=False)
    intent = forms.ChoiceField(required=False, choices=INBOX_INTENTS)
    sort = forms.ChoiceField(required=False, choices=INBOX_SORTS)
    q = forms.CharField(required=False, max_length=100, label="Search")
    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, *args: Any, who: list[tuple[str, str]], sources: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["who"].choices = who  # type: ignore[attr-defined]
        self.fields["source"].choices = [("", "Any source"), *sources]  # type: ignore[attr-defined]

    def query(self) -> tuple[InboxQuery, int]:
        """The inbox query and page asked for; a value the form refuses is
        dropped rather than failing the page."""
        # What is valid of a partly bad request (a stale source key) still applies.
        self.is_valid()
        data = self.cleaned_data
        query = InboxQuery(
            who=data.get("who") or "",
            needs_reply=bool(data.get("needs_reply")),
            channel=data.get("channel") or "",
            stage=data.get("stage") or "",
            source=data.get("source") or "",
            q=(data.get("q") or "").strip(),
            intent=data.get("intent") or "",
            sort=data.get("sort") or "",
        )
        return query, int(data.get("page") or 1)


class ReplyForm(forms.Form):
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), max_length=1600, label="Reply")
    channel = forms.ChoiceField(choices=[(c, c) for c in REPLY_CHANNELS], initial="sms")
    template_key = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)
    subject = forms.CharField(required=False, max_length=200, label="Subject (email)")
    # The composer's own key: the message's idempotency key, so the same
    # form sent twice (a double click, a retried request) is one message.
    form_key = forms.CharField(max_length=64, widget=forms.HiddenInput)

    def __init__(self, *args: Any, channels: list[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {})
        kwargs["initial"].setdefault("form_key", uuid.uuid4().hex)
        super().__init__(*args, **kwargs)
        offered = channels if channels is not None else list(REPLY_CHANNELS)
        labels = {"sms": "SMS", "instagram": "Instagram DM", "thumbtack": "Thumbtack", "yelp": "Yelp", "email": "Email"}
        self.fields["channel"].choices = [(c, labels.get(c, c)) for c in offered]  # type: ignore[attr-defined]


class NextActionForm(forms.Form):
    title = forms.CharField(max_length=300, label="Next action")
    # A datetime-local input: the viewer's zone (the current one), stored in UTC.
    due_at = forms.DateTimeField(
        label="Due",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
    )


class HoldForm(forms.Form):
    hold = forms.TypedChoiceField(choices=[("1", "hold"), ("0", "release")], coerce=lambda v: v == "1")
    reason = forms.CharField(required=False, max_length=300)


class CallForm(forms.Form):
    outcome = forms.ChoiceField(choices=[(k, CALL_WORDS.get(k, k)) for k in CALL_OUTCOMES])
    direction = forms.ChoiceField(choices=[("out", "I called them"), ("in", "They called")], initial="out")
    minutes = forms.IntegerField(required=False, min_value=0, max_value=600, label="Minutes")
    note = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class NoteForm(forms.Form):
    body = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 2}), label="Note")


class ReassignForm(forms.Form):
    owner = forms.ModelChoiceField(queryset=TeamMember.objects.none())
    reason = forms.CharField(required=False, max_length=300)

    def __init__(self, *args: Any, business_id: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Who may own a lead: the roles that read its conversation.
        self.fields["owner"].queryset = TeamMember.objects.filter(  # type: ignore[attr-defined]
            business_id=business_id, is_active=True, role__in=sorted(SALES)
        )


class ReasonForm(forms.Form):
    """An action with nothing to fill in but an optional reason (mark reached, mark done)."""

    reason = forms.CharField(required=False, max_length=300)
    next = forms.CharField(required=False, max_length=500)
