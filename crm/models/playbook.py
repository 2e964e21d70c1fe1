from __future__ import annotations

from django.conf import settings
from django.db import models

from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.leads import MessageTemplate


class MessageTemplateVersion(models.Model):
    """One text a playbook template has had or is proposed to have.

    The template row holds the text in force; a version becomes that text only
    when a person approves it (`agents.playbook.templates.template_approve`).
    Approval is a person's act: the database refuses an approval time without
    the approving user, and an approval by the user who proposed the text.
    """

    public_id = PublicIdField(prefix="tplv")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    template = models.ForeignKey(MessageTemplate, on_delete=models.PROTECT, related_name="versions")
    version = models.PositiveIntegerField()
    subject = models.CharField(max_length=200, blank=True)
    body = models.TextField()
    # A username, "agent:<role>", or "business_file" for the text as loaded.
    proposed_by = models.CharField(max_length=150)
    proposed_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["template", "version"]
        constraints = [
            models.UniqueConstraint(fields=["template", "version"], name="crm_messagetemplateversion_unique_version"),
            models.CheckConstraint(
                condition=models.Q(version__gte=1), name="crm_messagetemplateversion_version_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(approved_by__isnull=True, approved_at__isnull=True)
                | models.Q(approved_by__isnull=False, approved_at__isnull=False),
                name="crm_messagetemplateversion_approved_by_a_person",
            ),
            models.CheckConstraint(
                condition=~models.Q(approved_by=models.F("proposed_by_user")),
                name="crm_messagetemplateversion_not_self_approved",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.template_id} v{self.version}"
