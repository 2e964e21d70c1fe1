from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.models import TeamMember
from crm.services.invitations import (
    invitation_create,
    invitation_link,
    invitation_mark_sent,
    invitation_refusal,
    invitation_send,
    login_link,
    recipient_of,
    sso_configured,
)


class Command(BaseCommand):
    help = (
        "Invite a team member of a business (its first owner, typically): email them a link to set their "
        "password and print the link, for an operator to hand over when no email can go out."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="The member's username, as the business file's team lists it")
        parser.add_argument("--business", required=True, help="The business's slug")

    def handle(self, *args: Any, **options: Any) -> None:
        username, slug = options["username"], options["business"]
        member = (
            TeamMember.objects.select_related("user", "business")
            .filter(user__username=username, business__slug=slug)
            .first()
        )
        if member is None:
            raise CommandError(
                f"{username} is not on the team of {slug}: add them to the business file's team and load it "
                "(`manage.py load_business FILE`)"
            )
        if refusal := invitation_refusal(member):
            raise CommandError(f"no invitation for {username}: {refusal}")
        invitation = invitation_create(member)
        invitation.refresh_from_db()
        if invitation.sent_at is None and not invitation.error:
            # Inside a caller's transaction the commit has not sent it yet: now.
            invitation = invitation_send(invitation.pk)
        who = f"{username} ({member.get_role_display().lower()} of {member.business.name})"
        self.stdout.write(f"Invitation {invitation.public_id} for {who}")
        if invitation.sent_at is not None:
            self.stdout.write(f"  emailed to {recipient_of(member)}")
        else:
            self.stdout.write(f"  not emailed: {invitation.error}")
        if sso_configured():
            self.stdout.write(f"  single sign-on: they sign in at {login_link()}")
        else:
            hours = settings.INVITATION_HOURS
            self.stdout.write(f"  link (works once, for {hours} hours): {invitation_link(member.user)}")
        if invitation.sent_at is None:
            # Printed for the operator to hand over: that is its sending.
            invitation_mark_sent(invitation)
            self.stdout.write("  hand this to them yourself (the link is theirs alone: it sets their password)")
