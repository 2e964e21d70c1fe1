"""What a decision resumes: one handler pair per approval kind.

approvals sits below agents (imports point one way: crm <- approvals <- agents), so it cannot call the role that
proposed a request. Instead the higher app registers, at startup (its
`AppConfig.ready`), what to do when a request of a kind is approved or
rejected, e.g. the send gate sends an approved message draft:

    approval_handler_register("message_draft", on_approved=draft_send, on_rejected=draft_cancel)

A handler is called as `handler(request, payload)` inside the decision's
transaction, after the request row is updated and its receipt written:
`request` is the decided ApprovalRequest (status, decided_by, decision_note
set; the records it concerns pinned on it: `request.message`,
`request.estimate`, `request.contact_point`, `request.lead`) and `payload` is
what was approved. A handler acts on the pinned records only, never on an id
read from the payload. An exception in a handler rolls the whole decision
back. `on_expired` runs when a request's deadline passes with no decision
(`approvals_expire`); it is separate from `on_rejected` on purpose: nobody
decided, so an unanswered opt-out question or complaint must not be treated
as dismissed. Without it an expiry resumes nothing.

Three hooks run before anything is written:

- `lock(request, payload)` first of all, inside the decision's transaction
  but before the request row is locked, on an approval or a rejection: take
  the locks crm.locks orders before an ApprovalRequest (a contact merge's
  identity locks, leads and contact rows), which the handler would otherwise
  take after it. `request` is the caller's object, not yet re-read: read what
  the hook needs afresh. Raise `ApprovalConflict` to refuse (nothing written).
- `check(request, payload)` before an approval or an edit: raise
  `approvals.services.ApprovalConflict` when what the request concerns has
  moved on (a draft that already left the queue), and nothing changes.
- `recheck(request, payload)` on an edit: re-runs the proposing role's own
  checks on the edited payload (the claims guard on a reworded draft) and
  returns what the next person should look at, as short lines for the
  summary and the receipt; raise `ApprovalInvalid` to refuse the edit.

A kind with no handler has nothing waiting on it: the decision stands alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crm.registry import Registry

if TYPE_CHECKING:
    from approvals.models import ApprovalRequest

ApprovalHandler = Callable[["ApprovalRequest", dict[str, Any]], None]
ApprovalRecheck = Callable[["ApprovalRequest", dict[str, Any]], list[str]]


@dataclass(frozen=True)
class ApprovalHandlers:
    on_approved: ApprovalHandler | None = None
    on_rejected: ApprovalHandler | None = None
    on_expired: ApprovalHandler | None = None
    check: ApprovalHandler | None = None
    recheck: ApprovalRecheck | None = None
    lock: ApprovalHandler | None = None


APPROVAL_HANDLERS: Registry[ApprovalHandlers] = Registry("approval handler")


def approval_handler_register(
    kind: str,
    *,
    on_approved: ApprovalHandler | None = None,
    on_rejected: ApprovalHandler | None = None,
    on_expired: ApprovalHandler | None = None,
    check: ApprovalHandler | None = None,
    recheck: ApprovalRecheck | None = None,
    lock: ApprovalHandler | None = None,
) -> None:
    """Say what a decision on a request of `kind` resumes; once per kind."""
    from approvals.models import ApprovalRequest

    if kind not in ApprovalRequest.Kind.values:
        raise ValueError(f"unknown approval kind {kind!r}")
    APPROVAL_HANDLERS.register(
        kind,
        ApprovalHandlers(
            on_approved=on_approved,
            on_rejected=on_rejected,
            on_expired=on_expired,
            check=check,
            recheck=recheck,
            lock=lock,
        ),
    )


def approval_handlers_for(kind: str) -> ApprovalHandlers | None:
    return APPROVAL_HANDLERS.get(kind)
