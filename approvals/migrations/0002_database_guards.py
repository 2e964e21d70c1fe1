from django.db import migrations

from crm.db_triggers import public_id_trigger, public_id_trigger_drop


class Migration(migrations.Migration):
    dependencies = [("approvals", "0001_initial"), ("crm", "0002_database_guards")]

    operations = [
        migrations.RunSQL(public_id_trigger("approvals_approvalrequest"), public_id_trigger_drop("approvals_approvalrequest")),
    ]
