from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("crm", "0018_forget_and_retention")]

    operations = [
        migrations.AddField(
            model_name="leadtouch",
            name="line_unknown",
            field=models.BooleanField(default=False),
        ),
    ]
