"""Forwarded calls recorded where the business turns it on (`calls` in its
file): whether, how the recording is transcribed, and the US states the
business operates in for the recording-consent announcement; a model call
names the call whose recording it transcribed."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('crm', '0032_conversions'),
    ]

    operations = [
        migrations.AddField(
            model_name='business',
            name='call_recording',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='business',
            name='call_states',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='business',
            name='call_transcription',
            field=models.CharField(choices=[('off', 'off'), ('model', 'model')], default='off', max_length=8),
        ),
        migrations.AddField(
            model_name='modelcall',
            name='call',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='model_calls', to='crm.call'),
        ),
        migrations.AddConstraint(
            model_name='business',
            constraint=models.CheckConstraint(condition=models.Q(('call_transcription__in', ['off', 'model'])), name='crm_business_call_transcription_valid'),
        ),
    ]
