from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("crm", "0044_line_type_lookup"),
    ]

    operations = [
        migrations.AddField(
            model_name="leadtouch",
            name="thread_id",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddIndex(
            model_name="leadtouch",
            index=models.Index(
                condition=models.Q(("thread_id", ""), _negated=True),
                fields=["business", "provider", "thread_id"],
                name="crm_leadtouch_thread_idx",
            ),
        ),
    ]
