"""The Human Gatekeeper's services: open, approve, reject, expire; who may decide; races; handlers."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from approvals.handlers import (
    APPROVAL_HANDLERS,
    ApprovalHandlers,
    approval_handler_register,
    approval_handlers_for,
)
from approvals.kinds import NothingEditable, approval_edit_register, approval_editable_fields
from approvals.models import ApprovalRequest
from approvals.services import (
    ApprovalError,
    ApprovalForbidden,
    ApprovalInvalid,
    ApprovalNotPending,
    SelfApproval,
    approval_approve,
    approval_edit,
    approval_reject,
    approval_request_open,
    approvals_expire,
)
from crm.models import Business, Receipt, Role, TeamMember
from tests.factories import BusinessFactory, UserFactory, lead_create, member_create

pytestmark = pytest.mark.django_db

DRAFT = {"body": "Hi Pat, we can come by Tuesday between 9 and 11."}
_phones = (f"+1212555{n:04d}" for n in itertools.count(100))


@pytest.fixture(autouse=True)
def no_registered_handlers() -> Iterator[None]:
    # The gate alone: whatever other apps registered at startup is set aside.
    with APPROVAL_HANDLERS.replaced():
        yield


@pytest.fixture
def resumed() -> list[tuple[str, str, dict[str, Any]]]:
    """Records every call of the message_draft handlers."""
    calls: list[tuple[str, str, dict[str, Any]]] = []

    def on_approved(request: ApprovalRequest, payload: dict[str, Any]) -> None:
        calls.append(("approved", request.public_id, payload))

    def on_rejected(request: ApprovalRequest, payload: dict[str, Any]) -> None:
        calls.append(("rejected", request.public_id, payload))

    def on_expired(request: ApprovalRequest, payload: dict[str, Any]) -> None:
        calls.append(("expired", request.public_id, payload))

    approval_handler_register("message_draft", on_approved=on_approved, on_rejected=on_rejected, on_expired=on_expired)
    return calls


def draft_open(business: Business, *, proposed_by: str = "agent:sms_assistant", **fields: Any) -> ApprovalRequest:
    if "lead" not in fields:
        fields["lead"] = lead_create(business, phone=next(_phones))
    fields.setdefault("payload", dict(DRAFT))
    return approval_request_open(
        business=business,
        kind="message_draft",
        summary="Reply mentions an arrival window",
        proposed_by=proposed_by,
        **fields,
    )


def receipts_of(request: ApprovalRequest) -> list[Receipt]:
    return list(Receipt.objects.filter(subject=request.public_id).order_by("id"))


def decisions_of(request: ApprovalRequest) -> list[Receipt]:
    return [r for r in receipts_of(request) if r.action != "approval.requested"]


def assert_untouched(request: ApprovalRequest) -> None:
    request.refresh_from_db()
    assert (request.status, request.decided_by, request.decided_at) == ("pending", None, None)
    assert request.payload == DRAFT and request.original_payload is None
    assert decisions_of(request) == []


# ------------------------------------------------------------------- opening


def test_opening_a_request_queues_it_pending_with_a_receipt_naming_the_proposer(business: Business) -> None:
    request = draft_open(business)

    request.refresh_from_db()
    assert request.status == "pending" and request.public_id.startswith("apr_")
    [receipt] = receipts_of(request)
    assert (receipt.actor, receipt.action, receipt.lead_id) == (
        "agent:sms_assistant",
        "approval.requested",
        request.lead_id,
    )
    assert receipt.after == {"kind": "message_draft", "payload": DRAFT}


def test_a_persons_proposal_records_the_user_who_proposed_it(business: Business, setter: TeamMember) -> None:
    request = draft_open(business, proposed_by="sam", proposed_by_user=setter.user)

    request.refresh_from_db()
    assert (request.proposed_by, request.proposed_by_user) == ("sam", setter.user)
    assert receipts_of(request)[0].actor == "sam"


# ------------------------------------------------------------------ deciding


def test_a_manager_approves_a_pending_request_and_the_receipt_records_it(
    business: Business, manager: TeamMember
) -> None:
    request = draft_open(business)

    decided = approval_approve(request, user=manager.user, note="fine to send")

    request.refresh_from_db()
    assert (request.status, request.decided_by, request.decision_note) == ("approved", manager.user, "fine to send")
    assert request.decided_at is not None and request.payload == DRAFT and request.original_payload is None
    assert decided.status == "approved"
    [receipt] = decisions_of(request)
    assert (receipt.actor, receipt.action, receipt.reason) == ("mia", "approval.approved", "fine to send")
    assert (receipt.before, receipt.after) == ({"status": "pending"}, {"status": "approved"})
    assert receipt.lead_id == request.lead_id


def test_a_manager_rejects_a_pending_request_with_the_note_on_the_receipt(
    business: Business, manager: TeamMember
) -> None:
    request = draft_open(business)

    approval_reject(request, user=manager.user, note="never promise a window")

    request.refresh_from_db()
    assert (request.status, request.decided_by, request.decision_note) == (
        "rejected",
        manager.user,
        "never promise a window",
    )
    assert request.payload == DRAFT
    [receipt] = decisions_of(request)
    assert (receipt.actor, receipt.action, receipt.reason) == ("mia", "approval.rejected", "never promise a window")
    assert (receipt.before, receipt.after) == ({"status": "pending"}, {"status": "rejected"})


def test_the_business_owner_and_an_operator_may_decide_too(business: Business) -> None:
    owner = member_create(business, Role.OWNER, username="olga")
    operator = UserFactory.create(username="root", is_superuser=True)
    first, second = draft_open(business), draft_open(business, lead=None)

    approval_approve(first, user=owner.user)
    approval_reject(second, user=operator)

    assert ApprovalRequest.objects.get(pk=first.pk).decided_by == owner.user
    assert ApprovalRequest.objects.get(pk=second.pk).decided_by == operator


def test_an_edit_is_the_editors_proposal_and_another_person_approves_it(
    business: Business, manager: TeamMember
) -> None:
    request = draft_open(business)
    edited = {"body": "Hi Pat, a technician will call you to set up a visit."}
    colleague = member_create(business, Role.MANAGER, username="max")

    approval_approve(request, user=manager.user, note="no arrival window", edited_payload=edited)

    request.refresh_from_db()
    assert (request.status, request.payload, request.original_payload) == ("pending", edited, DRAFT)
    assert (request.proposed_by, request.proposed_by_user, request.decided_by) == ("mia", manager.user, None)
    [receipt] = decisions_of(request)
    assert (receipt.action, receipt.actor, receipt.reason) == ("approval.edited", "mia", "no arrival window")
    assert receipt.before == {"proposed_by": "agent:sms_assistant", "payload": DRAFT}
    assert receipt.after == {"proposed_by": "mia", "payload": edited, "findings": []}
    with pytest.raises(SelfApproval, match="mia proposed"):
        approval_approve(request, user=manager.user)

    approval_approve(request, user=colleague.user, note="fine")

    request.refresh_from_db()
    assert (request.status, request.decided_by, request.payload) == ("approved", colleague.user, edited)
    assert [r.action for r in decisions_of(request)] == ["approval.edited", "approval.approved"]


def test_the_database_refuses_the_editors_approval_written_around_the_service(
    business: Business, manager: TeamMember
) -> None:
    request = draft_open(business)
    approval_edit(request, user=manager.user, payload={"body": "Hi Pat, we will call you."})

    with pytest.raises(IntegrityError, match="approvals_approvalrequest_not_self_approved"), transaction.atomic():
        ApprovalRequest.objects.filter(pk=request.pk).update(
            status="approved", decided_by=manager.user, decided_at=timezone.now()
        )


def test_a_second_edit_keeps_the_first_proposers_payload(business: Business, manager: TeamMember) -> None:
    request = draft_open(business)
    colleague = member_create(business, Role.MANAGER, username="max")
    approval_edit(request, user=manager.user, payload={"body": "First rewording."})

    approval_edit(request, user=colleague.user, payload={"body": "Second rewording."})

    request.refresh_from_db()
    assert (request.proposed_by, request.payload, request.original_payload) == (
        "max",
        {"body": "Second rewording."},
        DRAFT,
    )
    approval_approve(request, user=manager.user)  # mia's words are gone: she may approve max's
    assert ApprovalRequest.objects.get(pk=request.pk).decided_by == manager.user


def test_an_edit_that_changes_nothing_is_refused(business: Business, manager: TeamMember) -> None:
    request = draft_open(business)

    with pytest.raises(ApprovalInvalid, match="changes nothing"):
        approval_edit(request, user=manager.user, payload=dict(DRAFT))

    assert_untouched(request)


def test_a_setter_cannot_edit(business: Business, setter: TeamMember) -> None:
    request = draft_open(business)

    with pytest.raises(ApprovalForbidden):
        approval_edit(request, user=setter.user, payload={"body": "edited"})

    assert_untouched(request)


@pytest.mark.parametrize(
    ("edits", "refusal"),
    [
        ({"body": "ok", "to": "+19005550100"}, "payload.to: not editable on a message_draft request"),
        ({"message": "msg_OTHER"}, "payload.message: "),
        ({"body": ""}, "payload.body"),
        ({"body": "x" * 1601}, "payload.body"),
    ],
)
def test_a_draft_edit_may_change_only_its_body(
    business: Business, manager: TeamMember, edits: dict[str, Any], refusal: str
) -> None:
    request = draft_open(business)

    with pytest.raises(ApprovalInvalid, match=re.escape(refusal)):
        approval_approve(request, user=manager.user, edited_payload=edits)

    assert_untouched(request)


def test_nothing_but_the_note_is_editable_on_other_kinds(business: Business, manager: TeamMember) -> None:
    request = approval_request_open(
        business=business,
        kind="exception",
        summary="Out of area",
        proposed_by="agent:fit",
        payload={"flags": ["out_of_area"]},
    )

    with pytest.raises(ApprovalInvalid, match="exception requests have no editable payload field"):
        approval_approve(request, user=manager.user, edited_payload={"flags": []})

    approval_approve(
        request, user=manager.user, note="we cover it this once", edited_payload={"flags": ["out_of_area"]}
    )
    request.refresh_from_db()
    assert (request.status, request.payload, request.decision_note) == (
        "approved",
        {"flags": ["out_of_area"]},
        "we cover it this once",
    )


def test_the_edit_registry_refuses_a_second_registration_for_a_kind() -> None:
    with pytest.raises(ImproperlyConfigured, match="registered already"):
        approval_edit_register("message_draft", NothingEditable)
    assert approval_editable_fields("message_draft") == {"body"}
    assert approval_editable_fields("high_value_estimate") == frozenset()


def test_approving_with_the_proposed_payload_unchanged_is_not_an_edit(business: Business, manager: TeamMember) -> None:
    request = draft_open(business)

    approval_approve(request, user=manager.user, edited_payload=dict(DRAFT))

    request.refresh_from_db()
    assert (request.payload, request.original_payload) == (DRAFT, None)
    assert decisions_of(request)[0].after == {"status": "approved"}


def test_an_edited_payload_that_is_not_an_object_is_refused(business: Business, manager: TeamMember) -> None:
    request = draft_open(business)

    with pytest.raises(ApprovalError, match="JSON object"):
        approval_approve(request, user=manager.user, edited_payload=["not", "a", "dict"])  # type: ignore[arg-type]

    assert_untouched(request)


@pytest.mark.parametrize("second", [approval_approve, approval_reject])
def test_a_decided_request_cannot_be_decided_again(business: Business, manager: TeamMember, second: Any) -> None:
    request = draft_open(business)
    approval_approve(request, user=manager.user)
    colleague = member_create(business, Role.MANAGER, username="max")

    with pytest.raises(ApprovalNotPending, match="already approved by mia"):
        second(request, user=colleague.user)

    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("approved", manager.user)
    assert [r.action for r in decisions_of(request)] == ["approval.approved"]


def test_a_request_past_its_deadline_cannot_be_approved(business: Business, manager: TeamMember) -> None:
    request = draft_open(business, expires_at=timezone.now() - timedelta(minutes=1))

    with pytest.raises(ApprovalNotPending, match="expired"):
        approval_approve(request, user=manager.user)

    request.refresh_from_db()
    assert request.status == "pending" and decisions_of(request) == []


# ------------------------------------------------------- who may not decide


@pytest.mark.parametrize("decide", [approval_approve, approval_reject])
def test_a_person_cannot_decide_their_own_proposal(business: Business, manager: TeamMember, decide: Any) -> None:
    request = draft_open(business, proposed_by="mia", proposed_by_user=manager.user)

    with pytest.raises(SelfApproval, match="mia proposed"):
        decide(request, user=manager.user)

    assert_untouched(request)


@pytest.mark.parametrize("proposed_by", ["mia", "MIA", "copilot:mia"])
def test_a_proposal_recorded_only_by_name_is_the_named_persons_own(
    business: Business, manager: TeamMember, proposed_by: str
) -> None:
    request = draft_open(business, proposed_by=proposed_by)

    with pytest.raises(SelfApproval):
        approval_approve(request, user=manager.user)

    assert_untouched(request)


def test_the_database_refuses_a_self_approval_written_around_the_service(
    business: Business, manager: TeamMember
) -> None:
    request = draft_open(business, proposed_by="mia", proposed_by_user=manager.user)

    with pytest.raises(IntegrityError, match="approvals_approvalrequest_not_self_approved"), transaction.atomic():
        ApprovalRequest.objects.filter(pk=request.pk).update(
            status="approved", decided_by=manager.user, decided_at=timezone.now()
        )

    assert_untouched(request)


def test_the_database_refuses_an_approval_without_a_decider(business: Business) -> None:
    request = draft_open(business)

    with pytest.raises(IntegrityError, match="approvals_approvalrequest_decider_matches_status"), transaction.atomic():
        ApprovalRequest.objects.filter(pk=request.pk).update(status="approved", decided_at=timezone.now())

    assert_untouched(request)


@pytest.mark.parametrize("decide", [approval_approve, approval_reject])
def test_a_setter_cannot_decide_even_on_their_own_lead(business: Business, setter: TeamMember, decide: Any) -> None:
    request = draft_open(business)

    with pytest.raises(ApprovalForbidden, match="only the business's managers and owners"):
        decide(request, user=setter.user)

    assert_untouched(request)


def test_another_businesss_manager_cannot_decide(business: Business, other_business: Business) -> None:
    stranger = member_create(other_business, Role.MANAGER, username="otto")
    request = draft_open(business)

    with pytest.raises(ApprovalForbidden):
        approval_approve(request, user=stranger.user)

    assert_untouched(request)


def test_an_inactive_manager_cannot_decide(business: Business) -> None:
    former = member_create(business, Role.MANAGER, username="fred", is_active=False)
    request = draft_open(business)

    with pytest.raises(ApprovalForbidden):
        approval_approve(request, user=former.user)

    assert_untouched(request)


# ------------------------------------------------------------------ handlers


def test_the_registered_handler_resumes_with_the_edited_payload_on_approve(
    business: Business, manager: TeamMember, resumed: list[Any]
) -> None:
    request = draft_open(business)
    edited = {"body": "Hi Pat, we will call to set a time."}
    approval_edit(request, user=member_create(business, Role.MANAGER, username="max").user, payload=edited)
    assert resumed == []  # an edit resumes nothing: nobody approved yet

    approval_approve(request, user=manager.user)

    assert resumed == [("approved", request.public_id, edited)]


def test_the_approval_handler_is_not_called_on_reject(
    business: Business, manager: TeamMember, resumed: list[Any]
) -> None:
    request = draft_open(business)

    approval_reject(request, user=manager.user)

    assert resumed == [("rejected", request.public_id, DRAFT)]


def test_a_refused_decision_resumes_nothing(business: Business, setter: TeamMember, resumed: list[Any]) -> None:
    request = draft_open(business)

    with pytest.raises(ApprovalForbidden):
        approval_approve(request, user=setter.user)

    assert resumed == []


def test_a_failing_handler_rolls_the_whole_decision_back(business: Business, manager: TeamMember) -> None:
    def broken(request: ApprovalRequest, payload: dict[str, Any]) -> None:
        raise RuntimeError("provider down")

    approval_handler_register("message_draft", on_approved=broken)
    request = draft_open(business)

    with pytest.raises(RuntimeError, match="provider down"):
        approval_approve(request, user=manager.user)

    assert_untouched(request)


def test_a_kind_without_a_handler_is_decided_alone(business: Business, manager: TeamMember) -> None:
    request = approval_request_open(
        business=business,
        kind="merge_contacts",
        summary="Same person?",
        proposed_by="agent:identity",
        payload={"keep": "cont_1", "merge": ["cont_2"]},
    )

    approval_approve(request, user=manager.user)

    assert approval_handlers_for("merge_contacts") is None
    assert ApprovalRequest.objects.get(pk=request.pk).status == "approved"


def test_a_handler_for_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown approval kind"):
        approval_handler_register("anything_goes", on_approved=lambda request, payload: None)


def test_replacing_the_handlers_restores_the_registry_afterwards() -> None:
    approval_handler_register("complaint", on_rejected=lambda request, payload: None)
    registered = approval_handlers_for("complaint")

    with APPROVAL_HANDLERS.replaced({"exception": ApprovalHandlers()}):
        assert approval_handlers_for("complaint") is None
        assert approval_handlers_for("exception") == ApprovalHandlers()

    assert approval_handlers_for("complaint") is registered
    assert approval_handlers_for("exception") is None


# -------------------------------------------------------------------- expiry


def test_expiry_moves_only_overdue_pending_requests_to_expired_with_receipts(
    business: Business, manager: TeamMember, resumed: list[Any]
) -> None:
    now = timezone.now()
    overdue = draft_open(business, expires_at=now - timedelta(minutes=5))
    later = draft_open(business, expires_at=now + timedelta(hours=1))
    open_ended = draft_open(business)
    decided = draft_open(business, expires_at=now + timedelta(minutes=1))
    approval_approve(decided, user=manager.user)
    resumed.clear()

    assert approvals_expire(now=now + timedelta(minutes=2)) == 1

    statuses = dict(ApprovalRequest.objects.values_list("public_id", "status"))
    assert statuses == {
        overdue.public_id: "expired",
        later.public_id: "pending",
        open_ended.public_id: "pending",
        decided.public_id: "approved",
    }
    overdue.refresh_from_db()
    assert overdue.decided_by is None and overdue.decided_at == now + timedelta(minutes=2)
    [receipt] = decisions_of(overdue)
    assert (receipt.actor, receipt.action) == ("agent:human_gatekeeper", "approval.expired")
    assert (receipt.before, receipt.after) == ({"status": "pending"}, {"status": "expired"})
    # The expiry handler, not the rejection one: nobody decided.
    assert resumed == [("expired", overdue.public_id, DRAFT)]


def test_an_expiry_without_an_expiry_handler_dismisses_nothing(business: Business) -> None:
    dismissed: list[str] = []
    approval_handler_register("complaint", on_rejected=lambda request, payload: dismissed.append(request.public_id))
    complaint = approval_request_open(
        business=business,
        kind="complaint",
        summary="Complaint",
        proposed_by="agent:sms_inbound",
        expires_at=timezone.now() - timedelta(seconds=1),
    )

    assert approvals_expire() == 1

    assert ApprovalRequest.objects.get(pk=complaint.pk).status == "expired"
    assert dismissed == []


def test_expiring_twice_expires_once(business: Business) -> None:
    request = draft_open(business, expires_at=timezone.now() - timedelta(seconds=1))

    assert approvals_expire() == 1
    assert approvals_expire() == 0

    assert [r.action for r in decisions_of(request)] == ["approval.expired"]


def test_an_expired_request_cannot_be_approved(business: Business, manager: TeamMember) -> None:
    request = draft_open(business, expires_at=timezone.now() - timedelta(seconds=1))
    approvals_expire()

    with pytest.raises(ApprovalNotPending, match="already expired"):
        approval_approve(request, user=manager.user)


def test_a_failing_handler_leaves_its_request_pending_and_the_others_expire(business: Business) -> None:
    def broken(request: ApprovalRequest, payload: dict[str, Any]) -> None:
        raise RuntimeError("cannot cancel")

    approval_handler_register("message_draft", on_expired=broken)
    past = timezone.now() - timedelta(seconds=1)
    stuck = draft_open(business, expires_at=past)
    other = approval_request_open(
        business=business, kind="complaint", summary="Complaint", proposed_by="agent:sms_inbound", expires_at=past
    )

    assert approvals_expire() == 1

    assert ApprovalRequest.objects.get(pk=stuck.pk).status == "pending"
    assert ApprovalRequest.objects.get(pk=other.pk).status == "expired"
    assert decisions_of(stuck) == []


# --------------------------------------------------------------------- races


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("first", "second"), [("mia", "mia"), ("mia", "max")], ids=["double-click", "two-managers"])
def test_racing_approvals_of_one_request_make_exactly_one_decision(first: str, second: str) -> None:
    business = BusinessFactory.create(slug="acme")
    users = {name: member_create(business, Role.MANAGER, username=name).user for name in {first, second}}
    request = draft_open(business)
    start = threading.Barrier(2)
    outcomes: list[str] = []
    lock = threading.Lock()

    def decide(username: str) -> None:
        try:
            mine = ApprovalRequest.objects.get(pk=request.pk)
            start.wait(timeout=30)
            try:
                approval_approve(mine, user=users[username], note=f"by {username}")
                outcome = "approved"
            except ApprovalNotPending:
                outcome = "not_pending"
            with lock:
                outcomes.append(outcome)
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(name,)) for name in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes) == ["approved", "not_pending"]
    request.refresh_from_db()
    assert request.status == "approved"
    assert [r.action for r in decisions_of(request)] == ["approval.approved"]
    assert decisions_of(request)[0].reason == request.decision_note


@pytest.mark.django_db(transaction=True)
def test_an_edit_racing_an_approval_never_approves_words_the_approver_did_not_send_back() -> None:
    business = BusinessFactory.create(slug="acme")
    editor = member_create(business, Role.MANAGER, username="mia").user
    approver = member_create(business, Role.MANAGER, username="max").user
    request = draft_open(business)
    reworded = {"body": "Hi Pat, a technician will call you."}
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(decide: Any) -> None:
        try:
            start.wait(timeout=30)
            decide()
        except ApprovalNotPending:
            pass  # the other one was first and decided it
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    # The approver sends back the payload they reviewed: if it changed meanwhile, theirs is an edit.
    threads = [
        threading.Thread(target=run, args=(lambda: approval_edit(request, user=editor, payload=reworded),)),
        threading.Thread(
            target=run, args=(lambda: approval_approve(request, user=approver, edited_payload=dict(DRAFT)),)
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    request.refresh_from_db()
    if request.status == "approved":  # the approval came first: the edit found it decided
        assert (request.payload, request.decided_by) == (DRAFT, approver)
    else:  # the edit came first: the approver's reviewed text is now their own proposal, undecided
        assert (request.status, request.payload, request.proposed_by_user) == ("pending", DRAFT, approver)
