"""A record of theirs, applied to ours through the services that own ours.

One mapper per kind says how their record is found among ours (its link,
else — for a client — a contact with one of its emails or phones), which
lead it belongs to, how it is created here (`estimate_record` then
`estimate_sent_elsewhere`, `job_record` then `job_complete`, an appointment,
`invoice_issue`, `payment_receive`), which of our fields it maps (`ours`,
digested on the link after every sync) and how a later version of theirs
changes ours. `apply_remote` does the rest, the same for every kind:

- under the link's row lock, a version of theirs no newer than the one last
  seen changes nothing (a duplicate or late webhook, a reconcile page older
  than a webhook's read);
- edited on both sides since the last sync (their version is newer and our
  fields no longer match the link's digest): their version wins, and ours
  is kept in the `sync.conflict` receipt;
- a parent not linked yet (a visit before its job) raises `Missing`: the
  engine reads that parent first and applies again;
- every pulled change writes a receipt (`sync.pulled`, `sync.conflict`,
  `sync.deleted_there`), and the services write their own.

Each apply is one unit of work (crm/services/units.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.db import IntegrityError, transaction
from django.db.models import Model, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.booking.services import (
    HOLDING,
    BookingError,
    appointment_cancel,
    appointment_mark_held,
    appointment_record_external,
    appointment_release_rescheduled,
)
from agents.capture.base import PaymentHints
from agents.followup.estimates import EstimateError, estimate_accept, estimate_decline, estimate_sent_elsewhere
from agents.revenue.jobs import JobError, invoice_issue, job_complete
from agents.revenue.payments import PaymentError, payment_receive
from agents.sync.base import CLIENT, ESTIMATE, INVOICE, JOB, PAYMENT, REQUEST, VISIT, Remote
from crm.models import (
    BEFORE_BOOKING_STAGES,
    Appointment,
    Contact,
    ContactPoint,
    ContactPointKind,
    Estimate,
    Invoice,
    Job,
    Lead,
    Payment,
    Stage,
    SyncConnection,
    SyncLink,
)
from crm.phones import email_normalize, phone_to_e164
from crm.services.inbound_handlers import RetryLater
from crm.services.receipts import receipt_write
from crm.services.records import appointment_record, estimate_record, job_record
from crm.services.sync import contact_names_set, digest, lead_of_contact, link_of
from crm.services.units import unit_of_work

ACTOR = "agent:sync"


class Missing(Exception):
    """A record of theirs this one hangs from is not linked yet."""

    def __init__(self, kind: str, external_id: str) -> None:
        super().__init__(f"{kind} {external_id} is not here yet")
        self.kind, self.external_id = kind, external_id


def _actor(connection: SyncConnection) -> str:
    return f"{ACTOR}:{connection.provider}"


def version_newer(version: str, seen: str) -> bool:
    """Whether their `version` comes after the one last seen (their times
    compared as times; anything else only as different text)."""
    if not seen:
        return True
    if not version:
        return False
    new, old = _parsed(version), _parsed(seen)
    if new is not None and old is not None:
        return new > old
    return version != seen


def _parsed(value: str) -> datetime | None:
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def _lead_via(connection: SyncConnection, remote: Remote, parents: tuple[str, ...]) -> Lead | None:
    """The lead of a record of theirs: through the first of its parents we
    have linked (a request we pushed is a lead of ours; a quote, job or
    invoice leads to theirs), else through its client's contact. A parent we
    read but have not linked yet is `Missing`; a request made over there,
    never ours, says nothing."""
    for kind in parents:
        external = remote.refs.get(kind, "")
        if not external:
            continue
        link = link_of(connection, kind, external_id=external)
        if link is not None and link.lead_id is not None:
            return Lead.objects.select_related("business", "contact").get(pk=link.lead_id)
        if link is None and kind != REQUEST:
            raise Missing(kind, external)
    client = remote.refs.get(CLIENT, "")
    if not client:
        return None
    link = link_of(connection, CLIENT, external_id=client)
    if link is None:
        raise Missing(CLIENT, client)
    contact = Contact.objects.filter(business_id=connection.business_id, public_id=link.record).first()
    return lead_of_contact(contact.pk) if link.record and contact is not None else None


@dataclass(frozen=True)
class Outcome:
    text: str
    record: Any = None  # the record of ours made, when one was


class Mapper(ABC):
    kind: ClassVar[str]
    model: ClassVar[type[Model]]
    # Where its lead is found, in order (then its client's contact).
    parents: ClassVar[tuple[str, ...]] = ()
    # Records of theirs it names that must be here before it is (a job's
    # quote: our job points at our estimate).
    needs: ClassVar[tuple[str, ...]] = ()

    def load(self, connection: SyncConnection, record: str) -> Any:
        return self.model._default_manager.filter(business_id=connection.business_id, public_id=record).first()

    def lead(self, connection: SyncConnection, remote: Remote) -> Lead | None:
        return _lead_via(connection, remote, self.parents)

    @abstractmethod
    def ours(self, record: Any) -> dict[str, Any]:
        """The mapped fields of our record, named as `Remote.fields` names them."""

    def theirs(self, remote: Remote) -> dict[str, Any]:
        return {key: remote.fields.get(key) for key in self.ours_keys}

    ours_keys: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def create(self, connection: SyncConnection, remote: Remote, lead: Lead) -> Outcome:
        """Our record for a record of theirs not linked yet, under `lead`."""

    @abstractmethod
    def update(self, connection: SyncConnection, record: Any, remote: Remote) -> str:
        """Ours set to theirs (theirs wins a conflict); what happened, in words."""

    def gone(self, connection: SyncConnection, record: Any) -> str:
        return "deleted there; ours is kept"


class ClientMapper(Mapper):
    kind = CLIENT
    model = Contact
    ours_keys = ("first_name", "last_name")

    def ours(self, record: Contact) -> dict[str, Any]:
        return {"first_name": record.first_name, "last_name": record.last_name}

    def match(self, connection: SyncConnection, remote: Remote) -> Contact | None:
        """The contact with one of the client's emails or phones (the oldest,
        when several people share one)."""
        region = connection.business.region
        emails = {email_normalize(e) for e in remote.fields.get("emails") or () if "@" in e}
        phones = {p for p in (phone_to_e164(raw, region) for raw in remote.fields.get("phones") or ()) if p}
        if not (emails or phones):
            return None
        points = ContactPoint.objects.filter(
            Q(kind=ContactPointKind.EMAIL, value__in=emails) | Q(kind=ContactPointKind.PHONE, value__in=phones),
            business_id=connection.business_id,
            contact__merged_into__isnull=True,
        )
        return Contact.objects.filter(pk__in=points.values("contact_id")).order_by("pk").first()

    def create(self, connection: SyncConnection, remote: Remote, lead: Lead) -> Outcome:
        # A client of theirs is matched to a contact of ours (apply_remote's
        # _client_first), never made from theirs: nothing calls this.
        raise NotImplementedError("a client is matched to a contact, never created")

    def update(self, connection: SyncConnection, record: Contact, remote: Remote) -> str:
        theirs = self.theirs(remote)
        changed = contact_names_set(
            record,
            first_name=str(theirs["first_name"]),
            last_name=str(theirs["last_name"]),
            actor=_actor(connection),
            reason=f"the client was changed in {connection.provider}",
        )
        return "name taken from theirs" if changed else "no mapped field differs"


class RequestMapper(Mapper):
    """Requests are ours, pushed one per lead; theirs change nothing here."""

    kind = REQUEST
    model = Lead

    def ours(self, record: Lead) -> dict[str, Any]:
        return {}

    def update(self, connection: SyncConnection, record: Lead, remote: Remote) -> str:
        return "a request is ours: nothing to take"

    def create(self, connection: SyncConnection, remote: Remote, lead: Lead) -> Outcome:
        return Outcome("skipped: a request made there is not a lead of ours")


class EstimateMapper(Mapper):
    kind = ESTIMATE
    model = Estimate
    parents = (REQUEST,)
    ours_keys = ("status", "amount")

    def ours(self, record: Estimate) -> dict[str, Any]:
        return {"status": record.status, "amount": str(record.amount)}

    def theirs(self, remote: Remote) -> dict[str, Any]:
        return {"status": remote.fields["status"], "amount": str(remote.fields["amount"])}

    def create(self, connection: SyncConnection, remote: Remote, lead: Lead) -> Outcome:
        fields = remote.fields
        if fields["status"] == Estimate.Status.DRAFT:
            return Outcome("skipped: a draft quote is not an estimate until it is sent")
        estimate = estimate_record(
            lead=lead,
            amount=fields["amount"],
            currency=connection.business.currency,
            actor=_actor(connection),
            description=str(fields.get("description") or "")[:2000],
        )
        estimate = estimate_sent_elsewhere(
            estimate, actor=_actor(connection), sent_at=fields.get("sent_at") or timezone.now()
        )
        self._decide(connection, estimate, fields["status"])
        return Outcome(f"estimate {estimate.public_id} recorded, {fields['status']}", estimate)

    def _decide(self, connection: SyncConnection, estimate: Estimate, status: str) -> str:
        try:
            if status == Estimate.Status.ACCEPTED:
                estimate_accept(estimate, actor=_actor(connection))
            elif status == Estimate.Status.DECLINED:
                estimate_decline(estimate, actor=_actor(connection), reason=f"archived in {connection.provider}")
            elif status == Estimate.Status.SENT:
                estimate_sent_elsewhere(estimate, actor=_actor(connection), sent_at=timezone.now())
        except EstimateError as exc:
            return f"status not taken: {exc}"
        return f"status {status}"

    def update(self, connection: SyncConnection, record: Estimate, remote: Remote) -> str:
        notes = []
        if remote.fields["status"] != record.status:
            notes.append(self._decide(connection, record, remote.fields["status"]))
        if remote.fields["amount"] != record.amount:
            # An estimate's amount is what was sent; a changed quote is a new one to send.
            notes.append(f"amount there {remote.fields['amount']}, here {record.amount}: not changed here")
        return "; ".join(notes) or "no mapped field differs"


class JobMapper(Mapper):
    kind = JOB
    model = Job
    parents = (REQUEST, ESTIMATE)
    needs = (ESTIMATE,)
    ours_keys = ("status",)

    def ours(self, record: Job) -> dict[str, Any]:
        return {"status": record.status}

    def create(self, connection: SyncConnection, remote: Remote, lead: Lead) -> Outcome:
        estimate: Estimate | None = None
        estimate_link = (
            link_of(connection, ESTIMATE, external_id=remote.refs[ESTIMATE]) if remote.refs.get(ESTIMATE) else None
        )
        if estimate_link is not None and estimate_link.record:
            estimate = Estimate.objects.filter(business_id=lead.business_id, public_id=estimate_link.record).first()
        job = job_record(
            lead=lead,
            actor=_actor(connection),
            status=Job.Status.SCHEDULED,
            scheduled_for=remote.fields.get("scheduled_for"),
            estimate=estimate,
        )
        if remote.fields["status"] == Job.Status.COMPLETED:
            job_complete(job, actor=_actor(connection), completed_at=remote.fields.get("completed_at"))
        return Outcome(f"job {job.public_id} recorded, {remote.fields['status']}", job)

    def update(self, connection: SyncConnection, record: Job, remote: Remote) -> str:
        if remote.fields["status"] == Job.Status.COMPLETED and record.status != Job.Status.COMPLETED:
            try:
                job_complete(record, actor=_actor(connection), completed_at=remote.fields.get("completed_at"))
            except JobError as exc:
                return f"completion not taken: {exc}"
            return "completed"
        if remote.fields["status"] != record.status:
            return f"status there {remote.fields['status']}, here {record.status}: not changed here"
        return "no mapped field differs"


def _visit_external_id(remote: Remote) -> str:
    # A moved visit is a new appointment here (rescheduled_from the old), so
    # the appointment's id names the visit at its time.
    starts = remote.fields["starts_at"].astimezone(UTC)
    return f"{remote.external_id}@{starts:%Y%m%dT%H%M%SZ}"


class VisitMapper(Mapper):
    kind = VISIT
    model = Appointment
    parents = (JOB,)
    needs = (JOB,)
    ours_keys = ("status", "starts_at", "ends_at")

    def ours(self, record: Appointment) -> dict[str, Any]:
        status = "held" if record.status == Appointment.Status.HELD else record.status
        return {"status": status, "starts_at": record.starts_at.isoformat(), "ends_at": record.ends_at.isoformat()}

    def theirs(self, remote: Remote) -> dict[str, Any]:
        fields = remote.fields
        return {
            "status": fields["status"],
            "starts_at": fields["starts_at"].isoformat() if fields.get("starts_at") else None,
            "ends_at": fields["ends_at"].isoformat() if fields.get("ends_at") else None,
        }

    def _book(
        self, connection: SyncConnection, remote: Remote, lead: Lead, old: Appointment | None = None
    ) -> Appointment:
        """An appointment for the visit: a booking of the lead when it is
        not past booking (the same reminders and nurture stop as any
        booking), else the record of a work visit on a lead already won."""
        fields, actor = remote.fields, _actor(connection)
        kw: dict[str, Any] = {
            "starts_at": fields["starts_at"],
            "ends_at": fields["ends_at"],
            "provider": connection.provider,
            "external_id": _visit_external_id(remote),
            "notes": str(fields.get("title") or ""),
            # A moved visit stays with its technician; one from a person's calendar is theirs.
            "assigned_to": old.assigned_to if old is not None else connection.member,
        }
        if lead.stage in (*BEFORE_BOOKING_STAGES, Stage.BOOKED):
            try:
                return appointment_record_external(lead, actor=actor, rescheduled_from=old, **kw)
            except BookingError:
                pass  # a lead that cannot be booked still had the visit: recorded as it is
        if old is not None:
            appointment_release_rescheduled(old, actor=actor)
        existing = Appointment.objects.filter(
            business_id=lead.business_id, provider=kw["provider"], external_id=kw["external_id"]
        ).first()
        return existing or appointment_record(
            lead=lead, actor=actor, status=Appointment.Status.SCHEDULED, rescheduled_from=old, **kw
        )

    def _held(self, connection: SyncConnection, appointment: Appointment) -> str:
        if appointment.status not in HOLDING:
            return f"held there; here {appointment.status}"
        if timezone.now() < appointment.starts_at:
            return "held there before its start: not marked here"
        appointment_mark_held(appointment, actor=_actor(connection))
        return "held"

    def create(self, connection: SyncConnection, remote: Remote, lead: Lead) -> Outcome:
        if remote.fields.get("starts_at") is None or remote.fields.get("ends_at") is None:
            return Outcome("skipped: an unscheduled visit is not an appointment")
        appointment = self._book(connection, remote, lead)
        note = self._held(connection, appointment) if remote.fields["status"] == "held" else "scheduled"
        return Outcome(f"appointment {appointment.public_id} recorded, {note}", appointment)

    def update(self, connection: SyncConnection, record: Appointment, remote: Remote) -> str:
        fields = remote.fields
        moved = fields.get("starts_at") and (
            fields["starts_at"] != record.starts_at or fields["ends_at"] != record.ends_at
        )
        if moved and record.status in HOLDING:
            new = self._book(connection, remote, record.lead, old=record)
            SyncLink.objects.filter(connection=connection, kind=VISIT, record=record.public_id).update(
                record=new.public_id
            )
            record = new
            note = f"moved: now {new.public_id}"
        else:
            note = "not moved"
        if fields["status"] == "held":
            note += "; " + self._held(connection, record)
        return note

    def gone(self, connection: SyncConnection, record: Appointment) -> str:
        if record.status not in HOLDING:
            return f"deleted there; here {record.status}"
        appointment_cancel(record, actor=_actor(connection), reason=f"the visit was deleted in {connection.provider}")
        return "canceled"


class InvoiceMapper(Mapper):
    kind = INVOICE
    model = Invoice
    parents = (JOB,)
    needs = (JOB,)
    ours_keys = ("status", "amount")

    def ours(self, record: Invoice) -> dict[str, Any]:
        return {"status": record.status, "amount": str(record.amount)}

    def theirs(self, remote: Remote) -> dict[str, Any]:
        return {"status": remote.fields["status"], "amount": str(remote.fields["amount"])}

    def create(self, connection: SyncConnection, remote: Remote, lead: Lead) -> Outcome:
        fields = remote.fields
        if fields["status"] in (Invoice.Status.DRAFT, Invoice.Status.VOID):
            return Outcome(f"skipped: a {fields['status']} invoice is not issued")
        job = None
        job_link = link_of(connection, JOB, external_id=remote.refs[JOB]) if remote.refs.get(JOB) else None
        if job_link is not None and job_link.record:
            job = Job.objects.filter(business_id=lead.business_id, public_id=job_link.record).first()
        try:
            invoice = invoice_issue(
                lead=lead,
                amount=fields["amount"],
                currency=connection.business.currency,
                actor=_actor(connection),
                job=job,
                number=fields.get("number") or "",
                due_at=fields.get("due_at"),
                issued_at=fields.get("issued_at"),
            )
        except JobError as exc:
            return Outcome(f"skipped: {exc}")
        return Outcome(f"invoice {invoice.public_id} issued", invoice)

    def update(self, connection: SyncConnection, record: Invoice, remote: Remote) -> str:
        # Paid is what payments make an invoice here (invoice_settle): theirs arrive as payments.
        if remote.fields["amount"] != record.amount:
            return f"amount there {remote.fields['amount']}, here {record.amount}: not changed here"
        return f"status there {remote.fields['status']}; here {record.status}"


class PaymentMapper(Mapper):
    kind = PAYMENT
    model = Payment
    parents = (INVOICE,)
    needs = (INVOICE,)
    ours_keys = ("amount",)

    def ours(self, record: Payment) -> dict[str, Any]:
        return {"amount": str(record.amount)}

    def theirs(self, remote: Remote) -> dict[str, Any]:
        return {"amount": str(remote.fields["amount"])}

    def create(self, connection: SyncConnection, remote: Remote, lead: Lead | None) -> Outcome:
        """The payment through Payment Matching, with our ids in its
        metadata when its invoice (or lead) is known: linked at once, and
        counted in revenue by the lead's campaign. A payment of a client no
        lead of ours explains is matched by its payer or left for a person."""
        fields = remote.fields
        if fields["amount"] <= 0:
            return Outcome("skipped: not a payment received (zero or negative)")
        metadata: dict[str, str] = {}
        invoice_link = (
            link_of(connection, INVOICE, external_id=remote.refs[INVOICE]) if remote.refs.get(INVOICE) else None
        )
        if invoice_link is not None and invoice_link.record:
            metadata["invoice"] = invoice_link.record
        if lead is not None:
            metadata["lead"] = lead.public_id
        try:
            received = payment_receive(
                connection.business,
                provider=connection.provider,
                external_id=remote.external_id,
                amount=fields["amount"],
                currency=connection.business.currency,
                received_at=fields.get("received_at") or timezone.now(),
                hints=PaymentHints(
                    metadata=metadata,
                    emails=tuple(fields.get("emails") or ()),
                    phones=tuple(fields.get("phones") or ()),
                    description=f"{connection.provider} payment {remote.external_id}",
                ),
            )
        except PaymentError as exc:
            return Outcome(f"skipped: {exc}")
        payment = received.payment
        return Outcome(f"payment {payment.public_id} recorded, {payment.match_status}", payment)

    def update(self, connection: SyncConnection, record: Payment, remote: Remote) -> str:
        if remote.fields["amount"] != record.amount:
            return f"amount there {remote.fields['amount']}, here {record.amount}: not changed here"
        return "no mapped field differs"


MAPPERS: dict[str, Mapper] = {
    mapper.kind: mapper
    for mapper in (
        ClientMapper(),
        RequestMapper(),
        EstimateMapper(),
        JobMapper(),
        VisitMapper(),
        InvoiceMapper(),
        PaymentMapper(),
    )
}


def ours_of(kind: str, record: Any) -> dict[str, Any]:
    """Our mapped fields of a record of `kind`, as the link digests them."""
    return MAPPERS[kind].ours(record)


# --- applying ----------------------------------------------------------------------------------


def _receipt(
    connection: SyncConnection,
    action: str,
    *,
    subject: str,
    remote: Remote | None,
    lead: Lead | None,
    reason: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    theirs = {"provider": connection.provider}
    if remote is not None:
        theirs.update(kind=remote.kind, external_id=remote.external_id, version=remote.version)
    receipt_write(
        business=connection.business,
        lead=lead,
        subject=subject,
        actor=_actor(connection),
        action=action,
        reason=reason[:300],
        before=before,
        after={**(after or {}), **theirs},
    )


def _locked_link(connection: SyncConnection, kind: str, external_id: str) -> SyncLink | None:
    return (
        SyncLink.objects.select_for_update().filter(connection=connection, kind=kind, external_id=external_id).first()
    )


def _link_made(
    connection: SyncConnection, remote: Remote, *, record: str, lead: Lead | None, ours: dict[str, Any] | None
) -> None:
    """The link of a record of theirs seen for the first time. Two workers
    applying the same record meet on the unique external id: the second's
    INSERT waits for the first's commit, fails, and its unit rolls back
    (the engine reads it again, and finds it unchanged)."""
    values = {
        "record": record,
        "lead": lead,
        "remote_version": remote.version,
        "local_digest": digest(ours) if ours is not None else "",
        "synced_at": timezone.now(),
    }
    updated = SyncLink.objects.filter(connection=connection, kind=remote.kind, external_id=remote.external_id).update(
        **values
    )
    if not updated:
        with transaction.atomic():
            SyncLink.objects.create(connection=connection, kind=remote.kind, external_id=remote.external_id, **values)


def apply_remote(connection: SyncConnection, remote: Remote) -> str:
    """Apply one record of theirs to ours; what happened, in words. Raises
    `Missing` for a parent not linked yet, `RetryLater` while a push of
    ours for the same person is in flight."""
    mapper = MAPPERS[remote.kind]
    with unit_of_work():
        link = _locked_link(connection, remote.kind, remote.external_id)
        if link is not None and link.record:
            return _apply_again(connection, mapper, link, remote)
        if remote.kind == CLIENT:
            return _client_first(connection, mapper, remote)
        for kind in mapper.needs:
            if remote.refs.get(kind) and link_of(connection, kind, external_id=remote.refs[kind]) is None:
                raise Missing(kind, remote.refs[kind])
        lead = mapper.lead(connection, remote)
        if lead is None and remote.kind != PAYMENT:
            _link_made(connection, remote, record="", lead=None, ours=None)
            return "skipped: nothing of ours explains it (no lead has this client)"
        outcome = mapper.create(connection, remote, lead)  # type: ignore[arg-type]
        if outcome.record is None:
            return outcome.text
        record = outcome.record
        record_lead = getattr(record, "lead", None) or lead
        _link_made(connection, remote, record=record.public_id, lead=record_lead, ours=mapper.ours(record))
        _receipt(
            connection,
            "sync.pulled",
            subject=record.public_id,
            remote=remote,
            lead=record_lead,
            reason=outcome.text,
            after=mapper.theirs(remote),
        )
        return outcome.text


def _apply_again(connection: SyncConnection, mapper: Mapper, link: SyncLink, remote: Remote) -> str:
    if not version_newer(remote.version, link.remote_version):
        return f"unchanged: {remote.kind} {remote.external_id} is at the version last seen"
    record = mapper.load(connection, link.record)
    if record is None:
        return f"skipped: {link.record} is no longer here"
    ours, theirs = mapper.ours(record), mapper.theirs(remote)
    # Edited on both sides since the last sync: theirs wins, ours goes in the receipt.
    conflict = bool(link.local_digest) and digest(ours) != link.local_digest and ours != theirs
    note = mapper.update(connection, record, remote)
    link.refresh_from_db()
    current = mapper.load(connection, link.record) or record
    SyncLink.objects.filter(pk=link.pk).update(
        remote_version=remote.version, local_digest=digest(mapper.ours(current)), synced_at=timezone.now()
    )
    lead = getattr(current, "lead", None) if not isinstance(current, Contact) else None
    if conflict:
        reason = f"edited on both sides since the last sync: {connection.provider}'s version kept; {note}"
        _receipt(
            connection,
            "sync.conflict",
            subject=link.record,
            remote=remote,
            lead=lead,
            reason=reason,
            before=ours,
            after=theirs,
        )
    else:
        _receipt(
            connection,
            "sync.pulled",
            subject=link.record,
            remote=remote,
            lead=lead,
            reason=note,
            before=ours,
            after=theirs,
        )
    return ("conflict, theirs kept: " if conflict else "updated: ") + note


def _client_first(connection: SyncConnection, mapper: Mapper, remote: Remote) -> str:
    """A client seen for the first time: linked to the contact with one of
    its emails or phones, or kept as theirs alone."""
    contact = ClientMapper().match(connection, remote)
    if contact is None:
        _link_made(connection, remote, record="", lead=None, ours=None)
        return "skipped: no contact here has this client's email or phone"
    mine = link_of(connection, CLIENT, record=contact.public_id)
    if mine is not None and mine.external_id is None:
        raise RetryLater(f"our push of {contact.public_id} is making its client right now")
    if mine is not None:
        # The contact is linked to another client of theirs already (two clients for one person there).
        _link_made(connection, remote, record="", lead=None, ours=None)
        return f"skipped: {contact.public_id} is linked to {connection.provider} client {mine.external_id}"
    try:
        with transaction.atomic():
            _link_made(connection, remote, record=contact.public_id, lead=None, ours=mapper.ours(contact))
    except IntegrityError as exc:
        raise RetryLater(f"{contact.public_id} was linked meanwhile") from exc
    _receipt(
        connection,
        "sync.linked",
        subject=contact.public_id,
        remote=remote,
        lead=None,
        reason="the client has this contact's email or phone",
    )
    return f"linked to {contact.public_id}"


def apply_gone(connection: SyncConnection, kind: str, external_id: str) -> str:
    """A record of theirs that is no longer there."""
    mapper = MAPPERS[kind]
    with unit_of_work():
        link = _locked_link(connection, kind, external_id)
        if link is None or not link.record:
            return "gone there; nothing of ours was linked to it"
        record = mapper.load(connection, link.record)
        if record is None:
            return f"gone there; {link.record} is gone here too"
        note = mapper.gone(connection, record)
        remote = Remote(kind, external_id, "", {})
        lead = getattr(record, "lead", None) if not isinstance(record, Contact) else None
        _receipt(connection, "sync.deleted_there", subject=link.record, remote=remote, lead=lead, reason=note)
        return note
