"""The outbox (events written with their change) and outbound webhooks:
subscriptions, deliveries and their attempts."""

import django.db.models.deletion
from django.db import migrations, models

import crm.fields
import crm.ids
from crm.db_triggers import public_id_trigger, public_id_trigger_drop


class Migration(migrations.Migration):

    dependencies = [
        ('crm', '0028_conversations_and_notes'),
    ]

    operations = [
        migrations.CreateModel(
            name='OutboxEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('public_id', crm.ids.PublicIdField(prefix='oev')),
                ('type', models.CharField(choices=[('lead.created', 'Lead Created'), ('lead.stage_changed', 'Lead Stage Changed'), ('lead.owner_changed', 'Lead Owner Changed'), ('message.received', 'Message Received'), ('appointment.booked', 'Appointment Booked'), ('appointment.held', 'Appointment Held'), ('appointment.no_show', 'Appointment No Show'), ('estimate.sent', 'Estimate Sent'), ('estimate.accepted', 'Estimate Accepted'), ('estimate.declined', 'Estimate Declined'), ('payment.recorded', 'Payment Recorded'), ('payment.matched', 'Payment Matched'), ('refund.recorded', 'Refund Recorded')], max_length=40)),
                ('subject', models.CharField(max_length=64)),
                ('data', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField()),
                ('seq', models.BigIntegerField(blank=True, null=True)),
                ('business', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='crm.business')),
                ('lead', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='crm.lead')),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.CreateModel(
            name='WebhookDelivery',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('public_id', crm.ids.PublicIdField(prefix='dlv')),
                ('seq', models.BigIntegerField()),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('held', 'Held'), ('sending', 'Sending'), ('delivered', 'Delivered'), ('dead', 'Dead'), ('dry_run', 'Dry Run')], default='pending', max_length=16)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('attempt_limit', models.PositiveIntegerField(default=9)),
                ('next_attempt_at', models.DateTimeField()),
                ('claimed_at', models.DateTimeField(blank=True, null=True)),
                ('delivered_at', models.DateTimeField(blank=True, null=True)),
                ('last_status_code', models.PositiveIntegerField(blank=True, null=True)),
                ('last_error', models.CharField(blank=True, max_length=300)),
                ('created_at', models.DateTimeField()),
                ('business', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='crm.business')),
                ('event', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='deliveries', to='crm.outboxevent')),
                ('lead', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='crm.lead')),
            ],
            options={
                'verbose_name_plural': 'webhook deliveries',
                'ordering': ['-id'],
            },
        ),
        migrations.CreateModel(
            name='WebhookAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField()),
                ('at', models.DateTimeField()),
                ('outcome', models.CharField(choices=[('delivered', 'Delivered'), ('failed', 'Failed'), ('refused', 'Refused'), ('lost', 'Lost'), ('dry_run', 'Dry Run')], max_length=16)),
                ('status_code', models.PositiveIntegerField(blank=True, null=True)),
                ('duration_ms', models.PositiveIntegerField(blank=True, null=True)),
                ('error', models.CharField(blank=True, max_length=300)),
                ('response_excerpt', models.TextField(blank=True)),
                ('request_headers', models.JSONField(blank=True, default=dict)),
                ('delivery', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='attempt_log', to='crm.webhookdelivery')),
            ],
            options={
                'ordering': ['delivery', 'number'],
            },
        ),
        migrations.CreateModel(
            name='WebhookSubscription',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('public_id', crm.ids.PublicIdField(prefix='hook')),
                ('url', models.URLField(max_length=1000)),
                ('events', models.JSONField(default=list)),
                ('secret', crm.fields.EncryptedTextField()),
                ('description', models.CharField(blank=True, max_length=200)),
                ('status', models.CharField(choices=[('active', 'Active'), ('paused', 'Paused')], default='active', max_length=16)),
                ('pause_reason', models.CharField(blank=True, max_length=300)),
                ('paused_at', models.DateTimeField(blank=True, null=True)),
                ('failing_since', models.DateTimeField(blank=True, null=True)),
                ('consecutive_failures', models.PositiveIntegerField(default=0)),
                ('last_success_at', models.DateTimeField(blank=True, null=True)),
                ('last_failure_at', models.DateTimeField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('business', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='webhook_subscriptions', to='crm.business')),
            ],
            options={
                'ordering': ['business', 'url'],
            },
        ),
        migrations.AddField(
            model_name='webhookdelivery',
            name='subscription',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='deliveries', to='crm.webhooksubscription'),
        ),
        migrations.AddIndex(
            model_name='outboxevent',
            index=models.Index(condition=models.Q(('seq__isnull', True)), fields=['business', 'id'], name='crm_outboxevent_unseq_idx'),
        ),
        migrations.AddConstraint(
            model_name='outboxevent',
            constraint=models.CheckConstraint(condition=models.Q(('type__in', ['lead.created', 'lead.stage_changed', 'lead.owner_changed', 'message.received', 'appointment.booked', 'appointment.held', 'appointment.no_show', 'estimate.sent', 'estimate.accepted', 'estimate.declined', 'payment.recorded', 'payment.matched', 'refund.recorded'])), name='crm_outboxevent_type_valid'),
        ),
        migrations.AddConstraint(
            model_name='outboxevent',
            constraint=models.UniqueConstraint(condition=models.Q(('seq__isnull', False)), fields=('business', 'seq'), name='crm_outboxevent_unique_seq'),
        ),
        migrations.AddConstraint(
            model_name='webhookattempt',
            constraint=models.UniqueConstraint(fields=('delivery', 'number'), name='crm_webhookattempt_unique_number'),
        ),
        migrations.AddConstraint(
            model_name='webhookattempt',
            constraint=models.CheckConstraint(condition=models.Q(('outcome__in', ['delivered', 'failed', 'refused', 'lost', 'dry_run'])), name='crm_webhookattempt_outcome_valid'),
        ),
        migrations.AddConstraint(
            model_name='webhooksubscription',
            constraint=models.UniqueConstraint(fields=('business', 'url'), name='crm_webhooksubscription_unique_url'),
        ),
        migrations.AddConstraint(
            model_name='webhooksubscription',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['active', 'paused'])), name='crm_webhooksubscription_status_valid'),
        ),
        migrations.AddIndex(
            model_name='webhookdelivery',
            index=models.Index(condition=models.Q(('status', 'pending')), fields=['next_attempt_at'], name='crm_webhookdelivery_due_idx'),
        ),
        migrations.AddIndex(
            model_name='webhookdelivery',
            index=models.Index(condition=models.Q(('status__in', ['pending', 'held', 'sending'])), fields=['subscription', 'lead', 'seq'], name='crm_webhookdelivery_ord_idx'),
        ),
        migrations.AddIndex(
            model_name='webhookdelivery',
            index=models.Index(condition=models.Q(('status', 'sending')), fields=['subscription', 'claimed_at'], name='crm_webhookdelivery_fly_idx'),
        ),
        migrations.AddIndex(
            model_name='webhookdelivery',
            index=models.Index(fields=['business', '-id'], name='crm_webhookdelivery_log_idx'),
        ),
        migrations.AddConstraint(
            model_name='webhookdelivery',
            constraint=models.UniqueConstraint(fields=('subscription', 'event'), name='crm_webhookdelivery_unique_event'),
        ),
        migrations.AddConstraint(
            model_name='webhookdelivery',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['pending', 'held', 'sending', 'delivered', 'dead', 'dry_run'])), name='crm_webhookdelivery_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='webhookdelivery',
            constraint=models.CheckConstraint(condition=models.Q(('attempts__lte', models.F('attempt_limit'))), name='crm_webhookdelivery_attempts_within_limit'),
        ),
        migrations.RunSQL(public_id_trigger("crm_outboxevent"), public_id_trigger_drop("crm_outboxevent")),
        migrations.RunSQL(public_id_trigger("crm_webhooksubscription"), public_id_trigger_drop("crm_webhooksubscription")),
        migrations.RunSQL(public_id_trigger("crm_webhookdelivery"), public_id_trigger_drop("crm_webhookdelivery")),
    ]
