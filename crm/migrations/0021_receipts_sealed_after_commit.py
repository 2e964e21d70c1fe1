# Receipts are inserted unsealed inside the domain transaction and linked into
# their business's chain after commit by one sealer per business
# (crm.services.receipts), so no domain transaction waits on a business-wide lock.

from django.db import migrations, models

from crm.db_triggers import (
    APPEND_ONLY_FUNCTION,
    RECEIPT_GUARD_FUNCTION,
    RECEIPT_GUARD_TRIGGER,
    RECEIPT_SEAL_FUNCTION,
    append_only_trigger,
    append_only_trigger_drop,
)


class Migration(migrations.Migration):
    dependencies = [("crm", "0020_inbound_attempts")]

    operations = [
        migrations.AlterModelOptions(name="receipt", options={"ordering": ["business", "id"]}),
        migrations.AlterField(
            model_name="receipt",
            name="seq",
            field=models.PositiveBigIntegerField(
                blank=True, help_text="Position in the business's chain, from 1", null=True
            ),
        ),
        migrations.AlterField(
            model_name="receipt", name="prev_hash", field=models.CharField(blank=True, max_length=64, null=True)
        ),
        migrations.AlterField(
            model_name="receipt", name="hash", field=models.CharField(blank=True, max_length=64, null=True)
        ),
        migrations.AddField(
            model_name="receipt", name="content_hash", field=models.CharField(blank=True, max_length=64, null=True)
        ),
        migrations.AddConstraint(
            model_name="receipt",
            constraint=models.CheckConstraint(
                condition=models.Q(seq__isnull=True, prev_hash__isnull=True, hash__isnull=True)
                | models.Q(seq__isnull=False, prev_hash__isnull=False, hash__isnull=False),
                name="crm_receipt_sealed_whole",
            ),
        ),
        migrations.AddConstraint(
            model_name="receipt",
            constraint=models.CheckConstraint(
                condition=models.Q(content_hash__isnull=False) | models.Q(seq__isnull=False),
                name="crm_receipt_content_hashed",
            ),
        ),
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(
                condition=models.Q(seq__isnull=True), fields=["business", "id"], name="crm_receipt_unsealed_idx"
            ),
        ),
        migrations.RunSQL(
            [RECEIPT_GUARD_FUNCTION, append_only_trigger_drop("crm_receipt"), RECEIPT_GUARD_TRIGGER],
            [
                APPEND_ONLY_FUNCTION,
                append_only_trigger_drop("crm_receipt"),
                append_only_trigger("crm_receipt"),
                "DROP FUNCTION IF EXISTS leadops_receipt_seal_once();",
            ],
        ),
        migrations.RunSQL(RECEIPT_SEAL_FUNCTION, "DROP FUNCTION IF EXISTS leadops_receipts_seal(bigint, integer);"),
    ]
