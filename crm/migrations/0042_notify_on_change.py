"""Two NOTIFY triggers (crm/notifications.py):

* an inbound event stored `received` wakes the intake loop
  (`leadops_inbound`, its id as payload): accepting a webhook stays one
  INSERT, with no task row beside it;
* any change to a source or a business (insert, update, delete, truncate)
  tells every web process to drop its cached copy of the sources, which
  carry their business (`leadops_sources`).

PostgreSQL delivers a notification when its transaction commits, and only
then, so nobody wakes for a row they cannot see yet.
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION leadops_inbound_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('leadops_inbound', NEW.id::text);
    RETURN NULL;
END $$;
CREATE TRIGGER crm_inboundevent_notify AFTER INSERT ON crm_inboundevent
    FOR EACH ROW WHEN (NEW.status = 'received') EXECUTE FUNCTION leadops_inbound_notify();

CREATE FUNCTION leadops_sources_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('leadops_sources', '');
    RETURN NULL;
END $$;
CREATE TRIGGER crm_source_notify AFTER INSERT OR UPDATE OR DELETE ON crm_source
    FOR EACH STATEMENT EXECUTE FUNCTION leadops_sources_notify();
CREATE TRIGGER crm_source_notify_truncate AFTER TRUNCATE ON crm_source
    FOR EACH STATEMENT EXECUTE FUNCTION leadops_sources_notify();
CREATE TRIGGER crm_business_notify AFTER UPDATE OR DELETE ON crm_business
    FOR EACH STATEMENT EXECUTE FUNCTION leadops_sources_notify();
CREATE TRIGGER crm_business_notify_truncate AFTER TRUNCATE ON crm_business
    FOR EACH STATEMENT EXECUTE FUNCTION leadops_sources_notify();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS crm_business_notify_truncate ON crm_business;
DROP TRIGGER IF EXISTS crm_business_notify ON crm_business;
DROP TRIGGER IF EXISTS crm_source_notify_truncate ON crm_source;
DROP TRIGGER IF EXISTS crm_source_notify ON crm_source;
DROP FUNCTION IF EXISTS leadops_sources_notify();
DROP TRIGGER IF EXISTS crm_inboundevent_notify ON crm_inboundevent;
DROP FUNCTION IF EXISTS leadops_inbound_notify();
"""


class Migration(migrations.Migration):
    dependencies = [("crm", "0041_periodic_run_named")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
