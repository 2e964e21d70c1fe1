"""Invitations: a business file's new members get an email with a link to set
their password; the link works once and for INVITATION_HOURS; owners and
managers send new ones from the team page; `manage.py invite` prints one."""

from __future__ import annotations

import re
import socket
import threading
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.mail.backends import locmem
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from crm.models import Business, Invitation, Role, TeamMember
from crm.services.business_file import business_file_load
from crm.services.invitations import invitation_send, invitations_sweep, invitations_unsent
from tests.factories import BusinessFactory, member_create

pytestmark = pytest.mark.django_db

User = get_user_model()
LINK = re.compile(r"https?://[^/\s]+(/account/invitation/[^/\s]+/[^/\s]+/)")
PASSWORD = "a-long-fresh-passphrase-42"
TEAM = reverse("admin:crm_teammember_changelist")

FILE = """\
business:
  slug: northwind
  name: Northwind Heating & Air
  timezone: America/Chicago
  region: US
team:
  - {username: olga, name: Olga Owner, email: olga@example.com, role: owner}
  - {username: sid, name: Sid Setter, email: sid@example.com, role: setter}
"""


def file_load(tmp_path: Path, captured: Any, text: str = FILE) -> Business:
    path = tmp_path / "northwind.yaml"
    path.write_text(text, encoding="utf-8")
    # The emails go once the load's transaction commits.
    with captured(execute=True):
        result = business_file_load(path)
    return result.business


def link_in(message: mail.EmailMessage) -> str:
    found = LINK.search(str(message.body))
    assert found, message.body
    return found.group(1)


def set_password(client: Client, path: str) -> Any:
    return client.post(path, {"new_password1": PASSWORD, "new_password2": PASSWORD})


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def invite_action(client: Client, *members: TeamMember) -> Any:
    return client.post(TEAM, {"action": "members_invite", "_selected_action": [m.pk for m in members]}, follow=True)


def test_a_business_file_invites_each_new_member_with_a_link_that_signs_them_in(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    business = file_load(tmp_path, django_capture_on_commit_callbacks)

    assert sorted(m.to[0] for m in mail.outbox) == ["olga@example.com", "sid@example.com"]
    assert all(m.subject == "Your LeadOps sign-in for Northwind Heating & Air" for m in mail.outbox)
    invitations = Invitation.objects.filter(member__business=business)
    assert invitations.count() == 2
    assert all(i.sent_at is not None and i.error == "" and i.accepted_at is None for i in invitations)

    olga = User.objects.get(username="olga")
    assert not olga.has_usable_password() and not olga.is_staff
    email = next(m for m in mail.outbox if m.to == ["olga@example.com"])
    assert "Your username is olga" in email.body and "as owner" in email.body
    client = Client()
    page = client.get(link_in(email))
    assert page.status_code == 200
    assert b'name="new_password1"' in page.content

    response = set_password(client, link_in(email))

    assert (response.status_code, response["Location"]) == (302, "/app/")
    olga.refresh_from_db()
    assert olga.check_password(PASSWORD) and olga.is_staff
    assert Invitation.objects.get(member__user=olga).accepted_at is not None
    # Signed in: the workspace opens.
    assert client.get("/app/inbox/").status_code == 200


def test_loading_the_file_again_invites_nobody_new(tmp_path: Path, django_capture_on_commit_callbacks: Any) -> None:
    file_load(tmp_path, django_capture_on_commit_callbacks)
    mail.outbox.clear()

    file_load(tmp_path, django_capture_on_commit_callbacks)

    assert mail.outbox == []
    assert Invitation.objects.count() == 2


def test_a_weak_password_is_refused_by_the_validators_and_the_link_still_works(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    file_load(tmp_path, django_capture_on_commit_callbacks)
    path = link_in(mail.outbox[0])
    client = Client()

    response = client.post(path, {"new_password1": "password", "new_password2": "password"})

    assert response.status_code == 200
    assert b"too common" in response.content
    assert client.get(path).status_code == 200


def test_the_link_expires_after_invitation_hours(
    tmp_path: Path, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.INVITATION_HOURS = 5
    file_load(tmp_path, django_capture_on_commit_callbacks)
    path = link_in(mail.outbox[0])
    now = timezone.now()

    with time_machine.travel(now + timedelta(hours=4, minutes=50)):
        assert Client().get(path).status_code == 200
    with time_machine.travel(now + timedelta(hours=5, minutes=1)):
        gone = Client().get(path)
        refused = set_password(Client(), path)

    assert gone.status_code == 410
    assert b"ask an owner or a manager" in gone.content.lower()
    assert refused.status_code == 410
    assert not User.objects.get(username=mail.outbox[0].to[0].split("@")[0]).has_usable_password()


def test_the_default_is_72_hours(tmp_path: Path, django_capture_on_commit_callbacks: Any) -> None:
    file_load(tmp_path, django_capture_on_commit_callbacks)
    path = link_in(mail.outbox[0])
    now = timezone.now()

    with time_machine.travel(now + timedelta(hours=71)):
        assert Client().get(path).status_code == 200
    with time_machine.travel(now + timedelta(hours=73)):
        assert Client().get(path).status_code == 410


def test_the_link_dies_once_used(tmp_path: Path, django_capture_on_commit_callbacks: Any) -> None:
    file_load(tmp_path, django_capture_on_commit_callbacks)
    path = link_in(mail.outbox[0])
    assert set_password(Client(), path).status_code == 302

    again = Client()
    assert again.get(path).status_code == 410
    assert set_password(again, path).status_code == 410


@pytest.mark.parametrize(
    "path",
    [
        "/account/invitation/garbled/garbled/",
        "/account/invitation/MQ/1-abc/",
        "/account/invitation/%21%21/zzzzzzzzzzzzzzzzzzzzzzzzzz-1/",
        "/account/invitation/OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk/k-1/",
    ],
)
def test_a_garbled_link_answers_410_with_a_page_that_says_what_to_do(path: str) -> None:
    response = Client().get(path)

    assert response.status_code == 410
    assert b"new invitation" in response.content


def test_a_link_of_the_right_user_with_a_tampered_token_is_refused(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    file_load(tmp_path, django_capture_on_commit_callbacks)
    path = link_in(mail.outbox[0])
    tampered = path[:-3] + ("0" if path[-3] != "0" else "1") + path[-2:]

    assert Client().get(tampered).status_code == 410


def test_a_password_reset_token_is_no_invitation(tmp_path: Path, django_capture_on_commit_callbacks: Any) -> None:
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    file_load(tmp_path, django_capture_on_commit_callbacks)
    olga = User.objects.get(username="olga")
    uid = urlsafe_base64_encode(force_bytes(olga.pk))

    assert Client().get(f"/account/invitation/{uid}/{default_token_generator.make_token(olga)}/").status_code == 410


def test_a_member_whose_membership_ended_cannot_use_their_link(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    file_load(tmp_path, django_capture_on_commit_callbacks)
    TeamMember.objects.filter(user__username="sid").update(is_active=False)
    email = next(m for m in mail.outbox if m.to == ["sid@example.com"])

    assert Client().get(link_in(email)).status_code == 410


def test_a_manager_sends_a_new_invitation_and_both_links_work_until_one_is_used(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    business = file_load(tmp_path, django_capture_on_commit_callbacks)
    sid = TeamMember.objects.get(business=business, user__username="sid")
    old = link_in(next(m for m in mail.outbox if m.to == ["sid@example.com"]))
    manager = member_create(business, Role.MANAGER, username="mia")
    mail.outbox.clear()

    # A second later: a token of a new timestamp.
    with time_machine.travel(timezone.now() + timedelta(seconds=2)):
        with django_capture_on_commit_callbacks(execute=True):
            response = invite_action(logged_in(manager.user), sid)
        assert response.status_code == 200
        assert b"1 invitation(s) on their way" in response.content

    assert [m.to for m in mail.outbox] == [["sid@example.com"]]
    new = link_in(mail.outbox[0])
    assert new != old
    latest = Invitation.objects.filter(member=sid).order_by("-created_at").first()
    assert latest.sent_by == manager.user and latest.sent_at is not None
    # The older link keeps working until the password is set (or its hours
    # run out): the token is tied to the user's password, not to one sending.
    assert Client().get(old).status_code == 200
    assert set_password(Client(), new).status_code == 302
    assert Client().get(old).status_code == 410
    assert Invitation.objects.filter(member=sid, accepted_at__isnull=False).count() == 2


def test_a_manager_of_another_business_cannot_send_an_invitation(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    business = file_load(tmp_path, django_capture_on_commit_callbacks)
    sid = TeamMember.objects.get(business=business, user__username="sid")
    otto = member_create(BusinessFactory.create(slug="other"), Role.MANAGER, username="otto")
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        invite_action(logged_in(otto.user), sid)

    assert mail.outbox == []
    assert Invitation.objects.filter(member=sid).count() == 1


def test_a_setter_has_no_team_page_to_send_from(tmp_path: Path, django_capture_on_commit_callbacks: Any) -> None:
    business = file_load(tmp_path, django_capture_on_commit_callbacks)
    sid = TeamMember.objects.get(business=business, user__username="sid")
    setter = member_create(business, Role.SETTER, username="sam")
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        response = invite_action(logged_in(setter.user), sid)

    assert response.status_code == 403
    assert mail.outbox == []


def test_a_member_who_has_a_password_gets_no_invitation(business: Business, manager: TeamMember) -> None:
    with_password = member_create(business, Role.SETTER, username="sam")

    response = invite_action(logged_in(manager.user), with_password)

    assert b"already has a password" in response.content
    assert not Invitation.objects.filter(member=with_password).exists()


def test_the_team_page_says_each_members_invitation_in_words(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    business = file_load(tmp_path, django_capture_on_commit_callbacks)
    owner = TeamMember.objects.get(business=business, user__username="olga")
    sid_link = link_in(next(m for m in mail.outbox if m.to == ["sid@example.com"]))
    set_password(Client(), link_in(next(m for m in mail.outbox if m.to == ["olga@example.com"])))
    owner.user.refresh_from_db()

    # A session ends after hours idle: each look signs in anew.
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        page = logged_in(owner.user).get(TEAM).content.decode()
    assert "invited 2\xa0days ago" in page
    assert "accepted 2\xa0days ago" in page
    with time_machine.travel(timezone.now() + timedelta(days=4)):
        page = logged_in(owner.user).get(TEAM).content.decode()
        assert Client().get(sid_link).status_code == 410
    assert "expired (sent 4\xa0days ago)" in page


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_send_the_mail_server_refuses_stays_visible_for_the_sweep(
    tmp_path: Path, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", _closed_port(), 2

    business = file_load(tmp_path, django_capture_on_commit_callbacks)

    unsent = list(invitations_unsent())
    assert len(unsent) == 2
    assert all(i.sent_at is None and "refused" in i.error for i in unsent)
    owner = TeamMember.objects.get(business=business, user__username="olga")
    owner.user.set_password(PASSWORD)
    owner.user.is_staff = True
    owner.user.save()
    # Someone who can sign in since is no longer the sweep's.
    assert [i.member.user.username for i in invitations_unsent()] == ["sid"]
    assert "not sent: the mail server refused it" in logged_in(owner.user).get(TEAM).content.decode()


def test_without_a_mail_server_the_row_says_so(
    tmp_path: Path, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "leadops.mail.UnsentMailBackend"

    file_load(tmp_path, django_capture_on_commit_callbacks)

    assert {i.error for i in Invitation.objects.all()} == {
        "no mail server (EMAIL_URL unset): hand over the link from `manage.py invite`"
    }


def test_with_single_sign_on_the_email_says_where_to_sign_in_and_carries_no_link(
    tmp_path: Path, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.OIDC_ISSUER = "https://login.example.com/realms/acme"

    file_load(tmp_path, django_capture_on_commit_callbacks)

    assert len(mail.outbox) == 2
    body = mail.outbox[0].body
    assert "single sign-on" in body
    assert f"{settings.PUBLIC_BASE_URL}/admin/login/" in body
    assert "/account/invitation/" not in body


def test_the_command_prints_a_link_that_works(tmp_path: Path, django_capture_on_commit_callbacks: Any) -> None:
    business = file_load(tmp_path, django_capture_on_commit_callbacks)
    mail.outbox.clear()
    out = StringIO()

    call_command("invite", "olga", "--business", business.slug, stdout=out)

    output = out.getvalue()
    assert "emailed to olga@example.com" in output
    assert [m.to for m in mail.outbox] == [["olga@example.com"]]
    printed = LINK.search(output)
    assert printed, output
    assert set_password(Client(), printed.group(1)).status_code == 302


def test_the_command_without_a_mail_server_prints_the_link_to_hand_over(
    tmp_path: Path, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    business = file_load(tmp_path, django_capture_on_commit_callbacks)
    settings.EMAIL_BACKEND = "leadops.mail.UnsentMailBackend"
    out = StringIO()

    call_command("invite", "olga", "--business", business.slug, stdout=out)

    output = out.getvalue()
    assert "not emailed: no mail server" in output and "hand this to them yourself" in output
    printed = LINK.search(output)
    assert printed and Client().get(printed.group(1)).status_code == 200
    # Handed over counts as sent: the team page says "invited", the sweep leaves it.
    latest = Invitation.objects.filter(member__user__username="olga").order_by("-created_at").first()
    assert latest.sent_at is not None
    assert not invitations_unsent().filter(pk=latest.pk).exists()


def test_the_command_refuses_a_stranger_and_someone_with_a_password(business: Business) -> None:
    member_create(business, Role.OWNER, username="olivia")

    with pytest.raises(CommandError, match="not on the team of acme"):
        call_command("invite", "nobody", "--business", "acme")
    with pytest.raises(CommandError, match="already has a password"):
        call_command("invite", "olivia", "--business", "acme")


def test_a_member_an_operator_adds_in_the_admin_is_invited(
    business: Business, django_capture_on_commit_callbacks: Any
) -> None:
    operator = User.objects.create_superuser("root", "root@example.com", "pw-for-tests-1")
    newcomer = User.objects.create_user("nina", "nina@example.com")  # no password: unusable
    client = logged_in(operator)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:crm_teammember_add"),
            {
                "business": business.pk,
                "user": newcomer.pk,
                "role": Role.SETTER,
                "display_name": "Nina",
                "weight": 1,
                "rotation_score": 0,
                "hours": "{}",
                "is_active": "on",
            },
        )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert [m.to for m in mail.outbox] == [["nina@example.com"]]
    assert Invitation.objects.get(member__user=newcomer).sent_by == operator
    assert set_password(Client(), link_in(mail.outbox[0])).status_code == 302


class SlowMailBackend(locmem.EmailBackend):
    """The test outbox, behind a mail server that takes its time: long
    enough for two senders of one invitation to overlap."""

    def send_messages(self, messages: Any) -> int:
        time.sleep(0.3)
        return int(super().send_messages(messages))


def test_the_sweep_sends_what_the_mail_server_refused_once_it_is_back(
    tmp_path: Path, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", _closed_port(), 2
    file_load(tmp_path, django_capture_on_commit_callbacks)
    assert mail.outbox == [] and Invitation.objects.filter(sent_at__isnull=True).count() == 2
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"

    # Rows of the last minutes are left to their own after-commit send.
    assert invitations_sweep() == {"tried": 0, "sent": 0}
    with time_machine.travel(timezone.now() + timedelta(minutes=10)):
        assert invitations_sweep() == {"tried": 2, "sent": 2}
        assert invitations_sweep() == {"tried": 0, "sent": 0}

    assert sorted(m.to[0] for m in mail.outbox) == ["olga@example.com", "sid@example.com"]
    assert not Invitation.objects.filter(sent_at__isnull=True).exists()
    assert Client().get(link_in(mail.outbox[0])).status_code == 200


def test_the_sweep_leaves_an_invitation_whose_link_would_be_dead(
    tmp_path: Path, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "leadops.mail.UnsentMailBackend"
    file_load(tmp_path, django_capture_on_commit_callbacks)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"

    with time_machine.travel(timezone.now() + timedelta(hours=73)):
        assert invitations_sweep() == {"tried": 0, "sent": 0}
    assert mail.outbox == []


@pytest.mark.django_db(transaction=True)
def test_the_sweep_and_the_after_commit_send_racing_email_once(settings: Any) -> None:
    settings.EMAIL_BACKEND = f"{__name__}.SlowMailBackend"
    business = BusinessFactory.create()
    member = member_create(business, Role.SETTER, username="rita")
    member.user.email = "rita@example.com"
    member.user.set_unusable_password()
    member.user.save()
    with transaction.atomic():
        # Made in a transaction whose commit is the race's start, not a send.
        invitation = Invitation.objects.create(member=member)
    barrier = threading.Barrier(2)

    def send() -> None:
        barrier.wait()
        try:
            invitation_send(invitation.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert [m.to for m in mail.outbox] == [["rita@example.com"]]
    assert Invitation.objects.get(pk=invitation.pk).sent_at is not None
