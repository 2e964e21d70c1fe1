"""Merge decisions and captures racing on PostgreSQL, with real threads (each
its own connection, as web and cluster workers have): a pair merges once,
and a capture never lands on a contact a merge has just emptied."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agents.capture.base import Capture
from agents.capture.identity import Applied, capture_apply
from approvals.models import ApprovalRequest
from approvals.services import ApprovalNotPending, approval_approve, approval_reject, approval_request_open
from crm.models import Business, Contact, ContactPoint, KeptApartPair, Lead, Receipt, Role
from crm.services.merge import contacts_merge, merge_locks
from devtools.polling import poll_until
from tests.factories import member_create

pytestmark = pytest.mark.django_db(transaction=True)

# A capture reaching a known person by email brings a new handle (a new
# phone would get a contact of its own: agents.capture.identity).
PHONE, EMAIL, NEW_HANDLE = "+12125550147", "pat@x.com", "pat.new"


def race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls at once, each in its own thread and connection; an
    exception is returned, not raised, so every outcome can be checked."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        try:
            barrier.wait(timeout=30)
            return call()
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def capture(**kw: Any) -> Capture:
    kw.setdefault("channel", "form")
    kw.setdefault("occurred_at", timezone.now())
    return Capture(**kw)


@pytest.fixture
def conflict(business: Business) -> tuple[Applied, Applied, ApprovalRequest]:
    by_phone = capture_apply(business=business, capture=capture(phones=[PHONE]))
    by_email = capture_apply(business=business, capture=capture(emails=[EMAIL]))
    capture_apply(business=business, capture=capture(phones=[PHONE], emails=[EMAIL]))
    return by_phone, by_email, ApprovalRequest.objects.get(kind="merge_contacts")


def test_two_managers_approving_one_merge_at_once_merge_the_pair_once(business, conflict) -> None:
    by_phone, by_email, request = conflict
    deciders = [member_create(business, Role.MANAGER, username=name).user for name in ("mia", "max")]

    outcomes = race([partial(approval_approve, request, user=user) for user in deciders])

    assert sorted(type(o).__name__ for o in outcomes) == ["ApprovalNotPending", "ApprovalRequest"]
    assert ApprovalRequest.objects.get(pk=request.pk).status == "approved"
    assert Receipt.objects.filter(action="contact.merged").count() == 1
    assert Contact.objects.get(pk=by_email.contact.pk).merged_into_id == by_phone.contact.pk
    assert not ContactPoint.objects.filter(contact=by_email.contact).exists()


def test_two_requests_for_one_pair_approved_at_once_merge_it_once(business, conflict) -> None:
    by_phone, by_email, request = conflict
    twin = approval_request_open(
        business=business,
        lead=by_email.lead,
        kind="merge_contacts",
        summary="Same person?",
        proposed_by="sam",
        payload={"keep": by_email.contact.public_id, "merge": [by_phone.contact.public_id]},
    )
    mia, max_ = (member_create(business, Role.MANAGER, username=name).user for name in ("mia", "max"))

    outcomes = race([lambda: approval_approve(request, user=mia), lambda: approval_approve(twin, user=max_)])

    assert all(isinstance(o, ApprovalRequest) for o in outcomes), outcomes
    assert set(ApprovalRequest.objects.values_list("status", flat=True)) == {"approved"}
    assert Receipt.objects.filter(action="contact.merged").count() == 1
    both = Contact.objects.filter(pk__in=[by_phone.contact.pk, by_email.contact.pk])
    roots = {c.merged_into_id or c.pk for c in both}
    assert len(roots) == 1
    assert ContactPoint.objects.values("contact").distinct().count() == 1


def test_an_approval_and_a_rejection_at_once_leave_one_outcome(business, conflict) -> None:
    by_phone, by_email, request = conflict
    mia, max_ = (member_create(business, Role.MANAGER, username=name).user for name in ("mia", "max"))

    outcomes = race([lambda: approval_approve(request, user=mia), lambda: approval_reject(request, user=max_)])

    assert sum(isinstance(o, ApprovalNotPending) for o in outcomes) == 1
    status = ApprovalRequest.objects.get(pk=request.pk).status
    merged = Contact.objects.get(pk=by_email.contact.pk).merged_into_id == by_phone.contact.pk
    assert (status, merged, KeptApartPair.objects.exists()) in {("approved", True, False), ("rejected", False, True)}


def test_captures_racing_the_approval_end_on_the_surviving_contact(business, conflict) -> None:
    by_phone, by_email, request = conflict
    mia = member_create(business, Role.MANAGER, username="mia").user
    calls: list[Callable[[], Any]] = [partial(approval_approve, request, user=mia)]
    calls += [
        partial(capture_apply, business=business, capture=capture(emails=[EMAIL], handles=[("instagram", f"pat{n}")]))
        for n in range(3)
    ]

    outcomes = race(calls)

    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    keep = by_phone.contact
    assert Contact.objects.get(pk=by_email.contact.pk).merged_into_id == keep.pk
    assert not ContactPoint.objects.exclude(contact=keep).exists()
    assert not Lead.objects.exclude(contact=keep).exists()
    assert Lead.objects.filter(contact=keep).exclude(stage="lost").count() == 1


def test_a_capture_that_waited_on_a_merge_joins_the_contact_the_merge_kept(business, conflict) -> None:
    """The capture resolves the email to the record being merged, then waits
    on its lock; when it gets it, the record is empty: it must read again."""
    by_phone, by_email, _ = conflict
    keep, merged = by_phone.contact, by_email.contact
    holding = threading.Event()

    def merge() -> Any:
        with transaction.atomic():
            merge_locks(business.pk, [keep.pk, merged.pk])
            holding.set()
            waiting = poll_until(_advisory_lock_waiters, timeout=20, interval=0.05)
            assert waiting, "the capture never waited on the merge's lock"
            return contacts_merge(keep, merged, actor="mia")

    def later_capture() -> Applied:
        assert holding.wait(timeout=20)
        return capture_apply(business=business, capture=capture(emails=[EMAIL], handles=[("instagram", NEW_HANDLE)]))

    merge_result, applied = race([merge, later_capture])

    assert not isinstance(merge_result, Exception), merge_result
    assert not isinstance(applied, Exception), applied
    assert applied.contact.pk == keep.pk
    assert ContactPoint.objects.get(value=NEW_HANDLE).contact_id == keep.pk
    assert not ContactPoint.objects.filter(contact=merged).exists()


def _advisory_lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return int(cursor.fetchone()[0])
