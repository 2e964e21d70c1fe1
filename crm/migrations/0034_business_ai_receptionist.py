from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("crm", "0033_call_recording"),
    ]

    operations = [
        migrations.AddField(
            model_name="business",
            name="ai_receptionist",
            field=models.BooleanField(default=False),
        ),
    ]
