"""Applying a parsed business file to the database: `business_spec_apply`
writes the rows in one transaction under a lock on the business's slug,
checks the references the parser could not, saves only the fields that
differ and writes one `business.loaded` receipt when anything changed.
`business_file_load` reads a file from disk, parses it and applies it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import connection, models, transaction

from crm.models import (
    Availability,
    Business,
    MessageTemplate,
    Role,
    Sequence,
    ServiceArea,
    ServiceLine,
    Source,
    TeamMember,
)
from crm.services.business_file.parsing import (
    AvailabilityRule,
    BusinessSpec,
    MemberRow,
    Row,
    SourceRow,
    WebhookRow,
    business_file_parse,
)
from crm.services.business_file.reading import BusinessFileError, Ref
from crm.services.contact_numbers import source_numbers_refusals
from crm.services.conversions import ConversionRefused, account_config_defaults, conversion_account_save
from crm.services.invitations import invitation_create, invitation_refusal
from crm.services.receipts import receipt_write
from crm.services.webhooks import WebhookRefused, webhook_subscription_save

# Serializes loads of the same slug, so two concurrent runs cannot both create it.
_LOAD_LOCK_NAMESPACE = 4208


@dataclass
class BusinessLoadResult:
    """What a load did: per kind of record, how many were created and updated."""

    business: Business
    path: str
    created: Counter[str] = field(default_factory=Counter)
    updated: Counter[str] = field(default_factory=Counter)
    # One line per created or changed record, naming changed fields (never values: secrets live here).
    changes: list[str] = field(default_factory=list)
    availability_rules: int = 0
    # Usernames of the new members invited (an email once the load commits).
    invited: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def record(self, kind: str, key: str, *, created: bool, fields: list[str]) -> None:
        if created:
            self.created[kind] += 1
            self.changes.append(f"{kind} {key}: created")
        elif fields:
            self.updated[kind] += 1
            self.changes.append(f"{kind} {key}: {', '.join(fields)}")

    def summary(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "created": dict(self.created),
            "updated": dict(self.updated),
            "changes": self.changes,
        }

    def report(self) -> list[str]:
        """Human-readable lines for the command's output."""
        slug = self.business.slug
        lines = []
        if not self.changed:
            lines.append(f"{slug}: nothing changed (the database already matches {self.path})")
        else:
            for label, counts in (("created", self.created), ("updated", self.updated)):
                if counts:
                    lines.append(
                        f"{slug}: {label} " + ", ".join(_plural(n, kind) for kind, n in sorted(counts.items()))
                    )
        lines.append(f"availability: {self.availability_rules} rules in the file")
        if self.invited:
            lines.append(
                f"invitations: {', '.join(self.invited)} (an email with a link to set a password; "
                "`manage.py invite USERNAME --business SLUG` prints one)"
            )
        return lines


def _plural(n: int, kind: str) -> str:
    if n == 1:
        return f"1 {kind}"
    return f"{n} {kind}es" if kind.endswith("s") else f"{n} {kind}s"


def business_file_load(path: str | Path, *, actor: str = "load_business") -> BusinessLoadResult:
    """Read, check and apply one business file in one transaction.

    Raises BusinessFileError (naming the file, line and reason) and writes
    nothing when the file is unreadable or anything in it is refused.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BusinessFileError(None, f"cannot read the file: {exc}", name) from exc
    spec = business_file_parse(text, path=name)
    try:
        return business_spec_apply(spec, actor=actor)
    except BusinessFileError as exc:
        exc.path = name
        raise


@transaction.atomic
def business_spec_apply(spec: BusinessSpec, *, actor: str = "load_business") -> BusinessLoadResult:
    """Create or update the business and everything the spec lists.

    Owns one transaction; references to rows the business already had are
    checked here, and any refusal rolls the whole load back. Saves only the
    fields that differ and writes one `business.loaded` receipt if anything
    changed.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOAD_LOCK_NAMESPACE, spec.slug])
    business, created, changed = _upsert(Business, {"slug": spec.slug}, spec.fields, spec.line)
    result = BusinessLoadResult(business=business, path=spec.path)
    result.record("business", spec.slug, created=created, fields=changed)

    for row in spec.sources:
        # Source keys appear in webhook URLs without a business, so they are unique overall.
        if Source.objects.filter(key=row.key).exclude(business=business).exists():
            raise BusinessFileError(row.line, f"source key {row.key!r} is already in use by another business")
        _check_source_numbers(business, row)
        _apply_row(result, "source", Source, {"business": business, "key": row.key}, row)
    for row in spec.service_lines:
        _apply_row(result, "service line", ServiceLine, {"business": business, "slug": row.key}, row)
    for row in spec.service_areas:
        _apply_row(result, "service area", ServiceArea, {"business": business, "name": row.key}, row)
    for row in spec.templates:
        _apply_row(result, "template", MessageTemplate, {"business": business, "key": row.key}, row)

    template_channels = dict(MessageTemplate.objects.filter(business=business).values_list("key", "channel"))
    for sequence in spec.sequences:
        for ref, channel in sequence.templates:
            if ref.name not in template_channels:
                raise BusinessFileError(ref.line, f"unknown template {ref.name!r} in sequence {sequence.key!r}")
            if template_channels[ref.name] != channel:
                known = template_channels[ref.name]
                raise BusinessFileError(
                    ref.line, f"template {ref.name!r} is a {known} template, but the step sends {channel}"
                )
        _apply_row(result, "sequence", Sequence, {"business": business, "key": sequence.key}, sequence)

    _apply_team(result, business, spec.team)

    if spec.availability_given:
        _apply_availability(result, business, spec.availability)
    result.availability_rules = len(spec.availability)

    for webhook in spec.webhooks:
        _apply_webhook(result, business, webhook, actor=actor)

    for row in spec.conversions:
        try:
            _account, changed = conversion_account_save(
                business=business,
                platform=row.key,
                config=account_config_defaults(business=business, platform=row.key, config=row.fields["config"]),
                secrets=row.secrets,
                is_active=row.fields["is_active"],
                actor=actor,
            )
        except ConversionRefused as exc:
            raise BusinessFileError(row.line, f"conversions.{row.key}: {exc}") from exc
        result.record(
            "conversions account",
            row.key,
            created=changed == ["created"],
            fields=[] if changed == ["created"] else changed,
        )

    if result.changed:
        receipt_write(
            business=business,
            actor=actor,
            action="business.loaded",
            subject=business.public_id,
            reason=f"loaded from {spec.path}" if spec.path else "loaded from a business file",
            after=result.summary(),
        )
    return result


def _apply_webhook(result: BusinessLoadResult, business: Business, row: WebhookRow, *, actor: str) -> None:
    """A subscription the file lists, created or brought in line (one the
    file no longer lists is left as it is: pause it in the admin)."""
    try:
        _subscription, changed = webhook_subscription_save(
            business=business,
            url=row.key,
            events=row.fields["events"],
            secret=row.secret,
            description=row.fields.get("description"),
            actor=actor,
        )
    except WebhookRefused as exc:
        key = "secret" if "secret" in str(exc) else "url"
        raise BusinessFileError(row.key_lines.get(key, row.line), f"webhook {row.key}: {exc}") from exc
    result.record("webhook", row.key, created=changed == ["created"], fields=[] if changed == ["created"] else changed)


def _check_source_numbers(business: Business, row: Row) -> None:
    lines = row.key_lines if isinstance(row, SourceRow) else {}
    refusals = source_numbers_refusals(business, row.fields["provider"], row.fields["config"])
    for key, reason in refusals.items():
        raise BusinessFileError(lines.get(key, row.line), reason)


def _apply_row(
    result: BusinessLoadResult, kind: str, model: type[models.Model], lookup: dict[str, Any], row: Row
) -> None:
    _obj, created, changed = _upsert(model, lookup, row.fields, row.line)
    result.record(kind, row.key, created=created, fields=changed)


def _upsert(model: type[Any], lookup: dict[str, Any], fields: dict[str, Any], line: int) -> tuple[Any, bool, list[str]]:
    """Create the row, or save only the fields that differ (none: no write).

    Returns (row, created, names of the fields changed).
    """
    obj = model.objects.filter(**lookup).first()
    if obj is None:
        obj = model(**lookup, **fields)
        _clean(obj, line)
        obj.save()
        return obj, True, []
    changed = [name for name, value in fields.items() if getattr(obj, name) != value]
    if changed:
        for name in changed:
            setattr(obj, name, fields[name])
        _clean(obj, line)
        auto = [f.name for f in model._meta.concrete_fields if getattr(f, "auto_now", False)]
        obj.save(update_fields=[*changed, *auto])
    return obj, False, changed


def _clean(obj: models.Model, line: int) -> None:
    try:
        obj.full_clean()
    except ValidationError as exc:
        if hasattr(exc, "error_dict"):
            reason = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in exc.message_dict.items())
        else:
            reason = " ".join(exc.messages)
        raise BusinessFileError(line, f"{obj._meta.verbose_name} refused: {reason}") from exc


def _apply_team(result: BusinessLoadResult, business: Business, team: list[MemberRow]) -> None:
    user_model = get_user_model()
    lines = {line.slug: line for line in ServiceLine.objects.filter(business=business)}
    areas = {area.name: area for area in ServiceArea.objects.filter(business=business)}
    groups = {group.name: group for group in Group.objects.filter(name__in=Role.values)}
    for row in team:
        wanted_lines = [_resolve(lines, ref, "service line", row.key) for ref in row.service_lines]
        wanted_areas = [_resolve(areas, ref, "service area", row.key) for ref in row.service_areas]
        user = user_model.objects.filter(username=row.key).first()
        if user is None:
            user = user_model(username=row.key, email=row.email)
            user.set_unusable_password()
            user.save()
            result.changes.append(f"user {row.key}: created")
        member, created, changed = _upsert(TeamMember, {"business": business, "user": user}, row.fields, row.line)
        if set(member.service_lines.all()) != set(wanted_lines):
            member.service_lines.set(wanted_lines)
            changed.append("service_lines")
        if set(member.service_areas.all()) != set(wanted_areas):
            member.service_areas.set(wanted_areas)
            changed.append("service_areas")
        # A user's role groups follow all their memberships, across businesses.
        roles = set(TeamMember.objects.filter(user=user).values_list("role", flat=True))
        missing = roles - set(groups)
        if missing:
            raise BusinessFileError(row.line, f"group {sorted(missing)[0]!r} does not exist: run `manage.py migrate`")
        held = set(user.groups.filter(name__in=Role.values).values_list("name", flat=True))
        if held != roles:
            user.groups.remove(*(groups[name] for name in held - roles))
            user.groups.add(*(groups[name] for name in roles - held))
            changed.append("groups")
        result.record("team member", row.key, created=created, fields=changed)
        # A new member who cannot sign in yet is invited; the email goes after the commit.
        if created and invitation_refusal(member) is None:
            invitation_create(member)
            result.invited.append(row.key)


def _resolve(known: dict[str, Any], ref: Ref, what: str, member: str) -> Any:
    if ref.name not in known:
        raise BusinessFileError(ref.line, f"unknown {what} {ref.name!r} in team member {member!r}")
    return known[ref.name]


def _apply_availability(result: BusinessLoadResult, business: Business, rules: list[AvailabilityRule]) -> None:
    """Make the business's active rules the file's: match each by members,
    days and slots; update capacity and lines; switch off the rest."""
    members = {m.user.get_username(): m for m in TeamMember.objects.filter(business=business).select_related("user")}
    lines = {line.slug: line for line in ServiceLine.objects.filter(business=business)}
    existing = list(
        Availability.objects.filter(business=business).prefetch_related("members__user", "service_lines").order_by("pk")
    )

    def identity(usernames: list[str], days: list[str], slots: list[str]) -> tuple[Any, ...]:
        return frozenset(usernames), tuple(days), tuple(slots)

    kept: set[int] = set()
    for rule in rules:
        for ref in rule.members:
            if ref.name not in members:
                raise BusinessFileError(ref.line, f"unknown team member {ref.name!r} in availability rule")
        for ref in rule.service_lines:
            if ref.name not in lines:
                raise BusinessFileError(ref.line, f"unknown service line {ref.name!r} in availability rule")
        wanted = identity([r.name for r in rule.members], rule.days, rule.slot_texts)
        wanted_lines = {lines[r.name] for r in rule.service_lines}
        label = f"{'+'.join(sorted(wanted[0]))} {','.join(rule.days)} {','.join(rule.slot_texts)}"
        row = next(
            (
                a
                for a in existing
                if a.pk not in kept
                and identity([m.user.get_username() for m in a.members.all()], a.days, a.slots) == wanted
            ),
            None,
        )
        if row is None:
            row = Availability(business=business, days=rule.days, slots=rule.slot_texts, capacity=rule.capacity)
            _clean(row, rule.line)
            row.save()
            row.members.set([members[r.name] for r in rule.members])
            row.service_lines.set(wanted_lines)
            result.record("availability rule", label, created=True, fields=[])
        else:
            changed = []
            if row.capacity != rule.capacity:
                row.capacity = rule.capacity
                changed.append("capacity")
            if not row.is_active:
                row.is_active = True
                changed.append("is_active")
            if changed:
                _clean(row, rule.line)
                row.save(update_fields=changed)
            if set(row.service_lines.all()) != wanted_lines:
                row.service_lines.set(wanted_lines)
                changed.append("service_lines")
            result.record("availability rule", label, created=False, fields=changed)
        kept.add(row.pk)
    for row in existing:
        if row.pk not in kept and row.is_active:
            row.is_active = False
            row.save(update_fields=["is_active"])
            result.record("availability rule", row.public_id, created=False, fields=["is_active"])
