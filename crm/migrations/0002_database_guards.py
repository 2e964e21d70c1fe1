from django.db import migrations

from crm.db_triggers import (
    APPEND_ONLY_FUNCTION,
    PUBLIC_ID_FUNCTION,
    append_only_trigger,
    append_only_trigger_drop,
    public_id_trigger,
    public_id_trigger_drop,
)

TABLES = [
    "crm_business", "crm_source", "crm_contact", "crm_contactpoint", "crm_consentevent", "crm_inboundevent",
    "crm_serviceline", "crm_servicearea", "crm_teammember", "crm_lead", "crm_leadtouch", "crm_task", "crm_timer",
    "crm_sequence", "crm_enrollment", "crm_messagetemplate", "crm_message", "crm_call", "crm_receipt",
    "crm_appointment", "crm_estimate", "crm_job", "crm_invoice", "crm_payment", "crm_refund",
]
APPEND_ONLY = ["crm_receipt", "crm_consentevent"]


class Migration(migrations.Migration):
    dependencies = [("crm", "0001_initial")]

    operations = [
        migrations.RunSQL(PUBLIC_ID_FUNCTION, "DROP FUNCTION IF EXISTS leadops_public_id_immutable() CASCADE;"),
        migrations.RunSQL(APPEND_ONLY_FUNCTION, "DROP FUNCTION IF EXISTS leadops_append_only() CASCADE;"),
        *[migrations.RunSQL(public_id_trigger(t), public_id_trigger_drop(t)) for t in TABLES],
        *[migrations.RunSQL(append_only_trigger(t), append_only_trigger_drop(t)) for t in APPEND_ONLY],
    ]
