"""Provider ids mean something inside one business.

An inbound delivery is a repeat only of one accepted by the same source's
endpoint (`accepted_by`): where each business signs its own deliveries
(Calendly, Typeform, website and hosted forms, Google Ads lead forms), one
business posting an id first could otherwise make another's real delivery
"a repeat". Appointments, payments and refunds are unique per business.

Stored events of those per-source endpoints learn the source that accepted
them (it is their `source`, set when they were stored); events of the
provider-wide endpoints (Twilio, Meta, Instagram, Stripe) keep none, as new
ones do when their endpoint names no source.
"""

import django.db.models.deletion
from django.db import migrations, models


BACKFILL = migrations.RunSQL(
    "UPDATE crm_inboundevent SET accepted_by_id = source_id"
    " WHERE source_id IS NOT NULL"
    " AND provider IN ('calendly', 'typeform', 'website', 'hosted_form', 'google_ads')",
    reverse_sql=migrations.RunSQL.noop,
)


class Migration(migrations.Migration):
    dependencies = [
        ("crm", "0039_service_line_unique_name"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="appointment",
            name="crm_appointment_unique_external_id",
        ),
        migrations.RemoveConstraint(
            model_name="inboundevent",
            name="crm_inboundevent_unique_external_id",
        ),
        migrations.RemoveConstraint(
            model_name="payment",
            name="crm_payment_unique_external_id",
        ),
        migrations.RemoveConstraint(
            model_name="refund",
            name="crm_refund_unique_external_id",
        ),
        migrations.AddField(
            model_name="inboundevent",
            name="accepted_by",
            field=models.ForeignKey(
                blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="crm.source"
            ),
        ),
        BACKFILL,
        migrations.AddConstraint(
            model_name="appointment",
            constraint=models.UniqueConstraint(
                fields=("business", "provider", "external_id"), name="crm_appointment_unique_external_id"
            ),
        ),
        migrations.AddConstraint(
            model_name="inboundevent",
            constraint=models.UniqueConstraint(
                fields=("provider", "accepted_by", "external_id"),
                name="crm_inboundevent_unique_external_id",
                nulls_distinct=False,
            ),
        ),
        migrations.AddConstraint(
            model_name="payment",
            constraint=models.UniqueConstraint(
                fields=("business", "provider", "external_id"), name="crm_payment_unique_external_id"
            ),
        ),
        migrations.AddConstraint(
            model_name="refund",
            constraint=models.UniqueConstraint(
                fields=("business", "provider", "external_id"), name="crm_refund_unique_external_id"
            ),
        ),
    ]
