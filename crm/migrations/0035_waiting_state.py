"""Who waits on us becomes one rule kept from the messages: a reply held for
approval no longer answers the person, a rejected, blocked, failed or
undelivered one leaves them waiting with the reason, urgent messages go
first, and a closing word on a finished lead waits on no one. Every
conversation is computed again under the new rule."""

import importlib

import django.db.models.deletion
from django.db import migrations, models

from crm.db_triggers import (
    CONVERSATION_FINISHED_TRIGGER,
    CONVERSATION_FINISHED_TRIGGER_DROP,
    CONVERSATION_FUNCTION,
    CONVERSATION_LEAD_TRIGGER,
    CONVERSATION_LEAD_TRIGGER_DROP,
    CONVERSATION_TRIGGER,
    CONVERSATION_TRIGGER_DROP,
)

BEFORE = importlib.import_module("crm.migrations.0028_conversations_and_notes")

RECOMPUTE = "SELECT leadops_conversation_waiting(lead_id) FROM crm_conversation;"


class Migration(migrations.Migration):
    dependencies = [
        ("crm", "0034_business_ai_receptionist"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="urgent",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="conversation",
            name="urgent_since",
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name="conversation",
            name="held_since",
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name="conversation",
            name="missed_answer",
            field=models.ForeignKey(
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="crm.message",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("urgent_since__isnull", False)),
                fields=["urgent_since"],
                name="crm_conversation_urgent_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("held_since__isnull", False)),
                fields=["awaiting_since"],
                name="crm_conversation_held_idx",
            ),
        ),
        migrations.RunSQL(
            [CONVERSATION_TRIGGER_DROP, CONVERSATION_LEAD_TRIGGER_DROP],
            [BEFORE.CONVERSATION_TRIGGER, BEFORE.CONVERSATION_LEAD_TRIGGER],
        ),
        migrations.RunSQL(
            CONVERSATION_FUNCTION,
            [
                "DROP FUNCTION IF EXISTS leadops_conversation_finished() CASCADE;",
                "DROP FUNCTION IF EXISTS leadops_conversation_waiting(bigint) CASCADE;",
                BEFORE.CONVERSATION_FUNCTION,
            ],
        ),
        migrations.RunSQL(
            [CONVERSATION_TRIGGER, CONVERSATION_LEAD_TRIGGER, CONVERSATION_FINISHED_TRIGGER],
            [CONVERSATION_TRIGGER_DROP, CONVERSATION_LEAD_TRIGGER_DROP, CONVERSATION_FINISHED_TRIGGER_DROP],
        ),
        migrations.RunSQL(RECOMPUTE, migrations.RunSQL.noop),
    ]
