"""Conversions to the ad platforms: accounts, uploads and their attempts;
Google's other click ids and Meta's lead id on touches (the lead id filled
in for Meta leads captured before, from their stored leadgen event)."""

import crm.fields
import crm.ids
import django.db.models.deletion
from django.db import migrations, models

from crm.db_triggers import public_id_trigger, public_id_trigger_drop

BACKFILL = """
UPDATE crm_leadtouch AS t SET meta_lead_id = e.external_id
FROM crm_inboundevent AS e
WHERE t.inbound_event_id = e.id AND e.provider = 'meta' AND e.kind = 'leadgen'
  AND t.meta_lead_id = '' AND length(e.external_id) <= 32
"""


class Migration(migrations.Migration):

    dependencies = [
        ('crm', '0031_search_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='leadtouch',
            name='gbraid',
            field=models.CharField(blank=True, max_length=300),
        ),
        migrations.AddField(
            model_name='leadtouch',
            name='meta_lead_id',
            field=models.CharField(blank=True, max_length=32),
        ),
        migrations.AddField(
            model_name='leadtouch',
            name='wbraid',
            field=models.CharField(blank=True, max_length=300),
        ),
        migrations.CreateModel(
            name='ConversionAccount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('public_id', crm.ids.PublicIdField(prefix='cva')),
                ('platform', models.CharField(choices=[('google', 'Google Ads'), ('meta', 'Meta')], max_length=16)),
                ('config', models.JSONField(blank=True, default=dict)),
                ('secrets', crm.fields.EncryptedTextField(blank=True)),
                ('is_active', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('business', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='conversion_accounts', to='crm.business')),
            ],
            options={
                'ordering': ['business', 'platform'],
            },
        ),
        migrations.CreateModel(
            name='ConversionUpload',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('public_id', crm.ids.PublicIdField(prefix='cvu')),
                ('platform', models.CharField(choices=[('google', 'Google Ads'), ('meta', 'Meta')], max_length=16)),
                ('kind', models.CharField(choices=[('qualified', 'Qualified'), ('booked', 'Booked'), ('appointment_held', 'Appointment Held'), ('won', 'Won'), ('paid', 'Paid'), ('restatement', 'Restatement')], max_length=20)),
                ('key', models.CharField(max_length=200, unique=True)),
                ('action', models.CharField(max_length=300)),
                ('occurred_at', models.DateTimeField()),
                ('window_ends_at', models.DateTimeField(blank=True, null=True)),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('sending', 'Sending'), ('sent', 'Sent'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('dry_run', 'Dry Run')], default='pending', max_length=16)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('errors', models.PositiveIntegerField(default=0)),
                ('error_limit', models.PositiveIntegerField(default=8)),
                ('next_attempt_at', models.DateTimeField()),
                ('claimed_at', models.DateTimeField(blank=True, null=True)),
                ('sent_at', models.DateTimeField(blank=True, null=True)),
                ('payload', models.JSONField(blank=True, default=dict)),
                ('value_amount', models.DecimalField(blank=True, decimal_places=2, max_digits=12, null=True)),
                ('currency', models.CharField(blank=True, max_length=3)),
                ('response', models.JSONField(blank=True, default=dict)),
                ('last_code', models.CharField(blank=True, max_length=120)),
                ('last_error', models.CharField(blank=True, max_length=500)),
                ('created_at', models.DateTimeField()),
                ('account', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='uploads', to='crm.conversionaccount')),
                ('business', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='crm.business')),
                ('event', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='crm.outboxevent')),
                ('lead', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='conversion_uploads', to='crm.lead')),
                ('restates', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='restatements', to='crm.conversionupload')),
                ('touch', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='crm.leadtouch')),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.CreateModel(
            name='ConversionAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField()),
                ('at', models.DateTimeField()),
                ('outcome', models.CharField(choices=[('sent', 'Sent'), ('not_yet', 'Not Yet'), ('retry', 'Retry'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('lost', 'Lost'), ('dry_run', 'Dry Run')], max_length=16)),
                ('code', models.CharField(blank=True, max_length=120)),
                ('message', models.CharField(blank=True, max_length=500)),
                ('duration_ms', models.PositiveIntegerField(blank=True, null=True)),
                ('response', models.JSONField(blank=True, default=dict)),
                ('upload', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='attempt_log', to='crm.conversionupload')),
            ],
            options={
                'ordering': ['upload', 'number'],
            },
        ),
        migrations.AddConstraint(
            model_name='conversionaccount',
            constraint=models.UniqueConstraint(fields=('business', 'platform'), name='crm_conversionaccount_unique_platform'),
        ),
        migrations.AddConstraint(
            model_name='conversionaccount',
            constraint=models.CheckConstraint(condition=models.Q(('platform__in', ['google', 'meta'])), name='crm_conversionaccount_platform_valid'),
        ),
        migrations.AddIndex(
            model_name='conversionupload',
            index=models.Index(condition=models.Q(('status', 'pending')), fields=['next_attempt_at'], name='crm_conversionupload_due_idx'),
        ),
        migrations.AddIndex(
            model_name='conversionupload',
            index=models.Index(condition=models.Q(('status', 'sending')), fields=['claimed_at'], name='crm_conversionupload_fly_idx'),
        ),
        migrations.AddIndex(
            model_name='conversionupload',
            index=models.Index(fields=['business', 'status', '-id'], name='crm_conversionupload_page_idx'),
        ),
        migrations.AddConstraint(
            model_name='conversionupload',
            constraint=models.UniqueConstraint(condition=models.Q(('kind', 'restatement'), _negated=True), fields=('account', 'lead', 'kind'), name='crm_conversionupload_one_per_kind'),
        ),
        migrations.AddConstraint(
            model_name='conversionupload',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['pending', 'sending', 'sent', 'failed', 'skipped', 'dry_run'])), name='crm_conversionupload_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='conversionupload',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['qualified', 'booked', 'appointment_held', 'won', 'paid', 'restatement'])), name='crm_conversionupload_kind_valid'),
        ),
        migrations.AddConstraint(
            model_name='conversionupload',
            constraint=models.CheckConstraint(condition=models.Q(('errors__lte', models.F('error_limit'))), name='crm_conversionupload_errors_within_limit'),
        ),
        migrations.AddConstraint(
            model_name='conversionattempt',
            constraint=models.UniqueConstraint(fields=('upload', 'number'), name='crm_conversionattempt_unique_number'),
        ),
        migrations.AddConstraint(
            model_name='conversionattempt',
            constraint=models.CheckConstraint(condition=models.Q(('outcome__in', ['sent', 'not_yet', 'retry', 'failed', 'skipped', 'lost', 'dry_run'])), name='crm_conversionattempt_outcome_valid'),
        ),
        migrations.RunSQL(public_id_trigger("crm_conversionaccount"), public_id_trigger_drop("crm_conversionaccount")),
        migrations.RunSQL(public_id_trigger("crm_conversionupload"), public_id_trigger_drop("crm_conversionupload")),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
