from django.db import connection


def test_dbg(db):
    with connection.cursor() as c:
        c.execute("select tgname from pg_trigger where tgrelid = 'crm_messagetemplateversion'::regclass")
        print(c.fetchall())
        c.execute("select prosrc from pg_proc where proname='crm_messagetemplateversion_frozen'")
        print(c.fetchall())
