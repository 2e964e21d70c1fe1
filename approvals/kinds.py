"""What a decision may change in a request's payload, per kind.

One serializer per kind names the payload fields a person may edit before
approving and validates them; every other key of the payload is fixed when
the request is proposed. A client may send a fixed key back unchanged (the
whole payload with a reworded `body`), never with another value: the
records a request concerns cannot be swapped for others. The decision's
`note` is outside the payload and allowed for every kind.

| kind | editable |
|---|---|
| message_draft, out_of_playbook | `body` (re-checked by the proposing role's `recheck`, e.g. the claims guard) |
| high_value_estimate, opt_out_question, complaint, merge_contacts, exception | nothing |

The registry refuses a second registration for a kind (filled in
`ApprovalsConfig.ready`); a kind without one has nothing editable.
"""

from __future__ import annotations

from rest_framework import serializers

from approvals.models import ApprovalRequest
from crm.registry import Registry

# Payload keys that name the records a request concerns (pinned at open).
PINNED_KEYS = frozenset({"message", "estimate", "point"})
# Twilio's limit for one SMS body; an email draft gets the same generous cap.
DRAFT_MAX_LENGTH = 1600


class DraftEdit(serializers.Serializer):
    """A drafted text may be reworded; where it goes and to whom may not."""

    body = serializers.CharField(max_length=DRAFT_MAX_LENGTH, help_text="The text to send instead of the draft")


class NothingEditable(serializers.Serializer):
    """Approve or reject as proposed; the decision's note says why."""


APPROVAL_EDITS: Registry[type[serializers.Serializer]] = Registry("approval edit serializer")


def approval_edit_register(kind: str, serializer_class: type[serializers.Serializer]) -> None:
    """Say which payload fields a decision on `kind` may edit; once per kind."""
    if kind not in ApprovalRequest.Kind.values:
        raise ValueError(f"unknown approval kind {kind!r}")
    APPROVAL_EDITS.register(kind, serializer_class)


def approval_edit_serializer(kind: str) -> type[serializers.Serializer]:
    return APPROVAL_EDITS.get(kind) or NothingEditable


def approval_editable_fields(kind: str) -> frozenset[str]:
    return frozenset(approval_edit_serializer(kind)().fields)


def register() -> None:
    K = ApprovalRequest.Kind
    for kind in (K.MESSAGE_DRAFT, K.OUT_OF_PLAYBOOK):
        approval_edit_register(kind, DraftEdit)
    for kind in (K.HIGH_VALUE_ESTIMATE, K.OPT_OUT_QUESTION, K.COMPLAINT, K.MERGE_CONTACTS, K.EXCEPTION):
        approval_edit_register(kind, NothingEditable)
