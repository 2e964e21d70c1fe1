"""SQL for the database-level guards that the ORM alone cannot promise.

Used by migrations; kept here so the SQL has one definition.
"""

from __future__ import annotations

PUBLIC_ID_FUNCTION = """
CREATE OR REPLACE FUNCTION leadops_public_id_immutable() RETURNS trigger AS $$
BEGIN
    IF NEW.public_id IS DISTINCT FROM OLD.public_id THEN
        RAISE EXCEPTION 'public_id of % is immutable', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
"""

APPEND_ONLY_FUNCTION = """
CREATE OR REPLACE FUNCTION leadops_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql;
"""


def public_id_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_public_id_immutable BEFORE UPDATE OF public_id ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION leadops_public_id_immutable();"
    )


def public_id_trigger_drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_public_id_immutable ON {table};"


# Row-level UPDATE and DELETE; TRUNCATE of the receipts is refused by its own
# statement-level trigger below.
def append_only_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION leadops_append_only();"
    )


def append_only_trigger_drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};"


# TRUNCATE fires no row trigger, so a bare `TRUNCATE crm_receipt` would remove a
# whole chain unseen. Refused unless the session says it is wiping the whole
# database on purpose: `manage.py flush` (crm's override) sets this. (The test
# runner's flush between tests deletes instead, with triggers off for its
# session: tests/management/commands/flush.py.) Anyone who can set it could
# also disable the trigger:
# it stops mistakes and application SQL, the hash chain finds the rest.
TRUNCATE_ALLOWED_SETTING = "leadops.wiping_database"

NO_TRUNCATE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION leadops_no_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('{TRUNCATE_ALLOWED_SETTING}', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION '% is append-only: TRUNCATE refused', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql;
"""


def no_truncate_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION leadops_no_truncate();"
    )


def no_truncate_trigger_drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};"


# The consent ledger stays append-only but for one change: forgetting a person
# replaces an event's evidence (IP, user agent, the text shown) with this
# marker, and nothing else in the row may change with it.
EVIDENCE_ERASED = '{"erased": true}'

CONSENT_LEDGER_FUNCTION = f"""
CREATE OR REPLACE FUNCTION leadops_consent_ledger() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.evidence = '{EVIDENCE_ERASED}'::jsonb
        AND (to_jsonb(NEW) - 'evidence') = (to_jsonb(OLD) - 'evidence') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql;
"""

CONSENT_LEDGER_TRIGGER = (
    "CREATE TRIGGER crm_consentevent_append_only BEFORE UPDATE OR DELETE ON crm_consentevent "
    "FOR EACH ROW EXECUTE FUNCTION leadops_consent_ledger();"
)


# A receipt is inserted unsealed (no seq, prev_hash or hash) inside the
# transaction whose change it records, and sealed into its business's chain
# once, after commit, by `leadops_receipts_seal`. So the receipts' guard lets
# exactly one UPDATE through per row: NULL → value for those three columns,
# every other column unchanged. Anything else, and any DELETE, is refused.
RECEIPT_GUARD_FUNCTION = """
CREATE OR REPLACE FUNCTION leadops_receipt_seal_once() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.hash IS NULL AND OLD.seq IS NULL AND OLD.prev_hash IS NULL
        AND NEW.hash IS NOT NULL AND NEW.seq IS NOT NULL AND NEW.prev_hash IS NOT NULL
        AND (to_jsonb(NEW) - 'seq' - 'prev_hash' - 'hash') = (to_jsonb(OLD) - 'seq' - 'prev_hash' - 'hash') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql;
"""

RECEIPT_GUARD_TRIGGER = (
    "CREATE TRIGGER crm_receipt_append_only BEFORE UPDATE OR DELETE ON crm_receipt "
    "FOR EACH ROW EXECUTE FUNCTION leadops_receipt_seal_once();"
)

# The sealer: links up to `p_limit` of a business's unsealed receipts into its
# chain, in the order it finds them committed (oldest id first), and returns
# how many. Each link is sha256("<prev_hash>:<seq>:<content_hash>"), where
# content_hash was computed from the row's content when it was inserted; the
# verifier (crm.services.receipts) recomputes both from the stored row. Runs
# in its own short transaction, never inside a domain transaction: it holds
# the business's seal lock and the unsealed rows it updates, nothing else, so
# it waits only for another sealer of the same business.
RECEIPT_SEAL_FUNCTION = """
CREATE OR REPLACE FUNCTION leadops_receipts_seal(p_business bigint, p_limit integer) RETURNS integer AS $$
DECLARE
    last_seq bigint;
    last_hash varchar(64);
    row record;
    sealed integer := 0;
BEGIN
    -- The seal lock (namespace 4207): only sealers take it.
    PERFORM pg_advisory_xact_lock(4207, p_business::integer);
    -- A fresh snapshot per statement (READ COMMITTED): this sees what the
    -- sealer that held the lock before us committed.
    SELECT seq, hash INTO last_seq, last_hash FROM crm_receipt
        WHERE business_id = p_business AND seq IS NOT NULL ORDER BY seq DESC LIMIT 1;
    IF last_seq IS NULL THEN
        last_seq := 0;
        last_hash := repeat('0', 64);
    END IF;
    FOR row IN SELECT id, content_hash FROM crm_receipt
            WHERE business_id = p_business AND seq IS NULL ORDER BY id LIMIT p_limit LOOP
        UPDATE crm_receipt SET seq = last_seq + 1, prev_hash = last_hash,
            hash = encode(
                sha256(convert_to(last_hash || ':' || (last_seq + 1) || ':' || row.content_hash, 'UTF8')), 'hex'
            )
            WHERE id = row.id
            RETURNING seq, hash INTO last_seq, last_hash;
        sealed := sealed + 1;
    END LOOP;
    RETURN sealed;
END $$ LANGUAGE plpgsql;
"""


# The inbox's summary of each lead's conversation (crm.models.Conversation):
# made with the lead, and moved by every message in the statement that
# writes it. A message moved to another lead (a merge) rebuilds both leads'
# rows from their messages.
#
# Who waits on us is one rule, `leadops_conversation_waiting`, computed from
# the messages themselves and never cleared as a side effect: the person
# waits from their first message in that nothing has answered yet, and an
# answer is a person's message out (never a role's, `agent:…`, nor an
# automated one) that reached them or will without anyone deciding again —
# sent or on its way, recorded in dry run, deferred only by quiet hours, or
# of unknown outcome while it is reconciled. A reply held for a manager's
# approval answers nothing yet: the person still waits, and the row says
# since when the answer is held (`held_since`). A rejected, blocked, failed
# or undelivered answer leaves them waiting, and the row names it
# (`missed_answer_id`) so the inbox can say why. On a lead that is won, lost
# or disqualified, only a message that asks something waits ("thanks, we
# went with them" is shown and waits on no one). `urgent_since`: the first
# waiting message read as urgent. A settle (crm.services.conversations:
# STOP, a person's "done") answers everything up to its time.
CONVERSATION_FUNCTION = """
CREATE OR REPLACE FUNCTION leadops_conversation_waiting(lead bigint) RETURNS void AS $$
DECLARE
    settled timestamptz;
    finished boolean;
    answered timestamptz;
    since timestamptz;
    urgent timestamptz;
    held timestamptz;
    missed bigint;
BEGIN
    -- The row first, locked: a concurrent writer of the same lead's
    -- messages waits here, and every statement below then reads (a snapshot
    -- of its own) what that writer committed, so neither computes the
    -- waiting from a view that lacks the other's message.
    SELECT c.settled_at INTO settled FROM crm_conversation c WHERE c.lead_id = lead FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT l.stage IN ('won', 'lost', 'disqualified') INTO finished FROM crm_lead l WHERE l.id = lead;
    SELECT GREATEST(max(o.created_at), settled) INTO answered FROM crm_message o
     WHERE o.lead_id = lead AND o.direction = 'out' AND NOT o.automated AND o.actor NOT LIKE 'agent:%'
       AND o.status IN ('queued', 'sending', 'sent', 'delivered', 'dry_run', 'deferred', 'unknown');
    answered := COALESCE(answered, '-infinity');
    SELECT min(i.created_at), min(i.created_at) FILTER (WHERE i.urgent) INTO since, urgent FROM crm_message i
     WHERE i.lead_id = lead AND i.direction = 'in' AND i.created_at > answered
       AND (NOT COALESCE(finished, false)
            OR i.intent IN ('booking_request', 'reschedule', 'question', 'price_question', 'complaint'));
    IF since IS NOT NULL THEN
        SELECT min(o.created_at) INTO held FROM crm_message o
         WHERE o.lead_id = lead AND o.direction = 'out' AND NOT o.automated AND o.actor NOT LIKE 'agent:%'
           AND o.status = 'pending_approval' AND o.created_at > answered;
        IF held IS NULL THEN
            SELECT o.id INTO missed FROM crm_message o
             WHERE o.lead_id = lead AND o.direction = 'out' AND NOT o.automated AND o.actor NOT LIKE 'agent:%'
               AND o.status IN ('blocked', 'failed', 'undelivered') AND o.created_at > answered
             ORDER BY o.created_at DESC, o.id DESC LIMIT 1;
        END IF;
    END IF;
    UPDATE crm_conversation
       SET awaiting_since = since, urgent_since = urgent, held_since = held, missed_answer_id = missed
     WHERE lead_id = lead
       AND (awaiting_since, urgent_since, held_since, missed_answer_id) IS DISTINCT FROM (since, urgent, held, missed);
END $$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION leadops_conversation_rebuild(lead bigint) RETURNS void AS $$
BEGIN
    IF lead IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO crm_conversation AS c
        (lead_id, business_id, last_message_id, last_message_at, last_channel, last_activity_at, last_inbound_at,
         last_intent)
    SELECT l.id, l.business_id, m.id, m.created_at, COALESCE(m.channel, ''),
        GREATEST(l.created_at, m.created_at),
        (SELECT max(i.created_at) FROM crm_message i WHERE i.lead_id = lead AND i.direction = 'in'),
        COALESCE((SELECT i.intent FROM crm_message i WHERE i.lead_id = lead AND i.direction = 'in'
                   ORDER BY i.created_at DESC, i.id DESC LIMIT 1), '')
    FROM crm_lead l
    LEFT JOIN LATERAL (
        SELECT id, created_at, channel FROM crm_message WHERE lead_id = lead ORDER BY created_at DESC, id DESC LIMIT 1
    ) m ON true
    WHERE l.id = lead
    ON CONFLICT (lead_id) DO UPDATE SET
        last_message_id = EXCLUDED.last_message_id, last_message_at = EXCLUDED.last_message_at,
        last_channel = EXCLUDED.last_channel, last_activity_at = EXCLUDED.last_activity_at,
        last_inbound_at = EXCLUDED.last_inbound_at, last_intent = EXCLUDED.last_intent;
    PERFORM leadops_conversation_waiting(lead);
END $$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION leadops_conversation_open() RETURNS trigger AS $$
BEGIN
    INSERT INTO crm_conversation (lead_id, business_id, last_channel, last_intent, last_activity_at)
    VALUES (NEW.id, NEW.business_id, '', '', NEW.created_at)
    ON CONFLICT (lead_id) DO NOTHING;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION leadops_conversation_finished() RETURNS trigger AS $$
BEGIN
    PERFORM leadops_conversation_waiting(NEW.id);
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION leadops_conversation_note() RETURNS trigger AS $$
DECLARE
    by_person boolean := NEW.direction = 'out' AND NOT NEW.automated AND NEW.actor NOT LIKE 'agent:%';
    waiting timestamptz;
    urgent timestamptz;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.lead_id IS DISTINCT FROM OLD.lead_id THEN
        PERFORM leadops_conversation_rebuild(OLD.lead_id);
        PERFORM leadops_conversation_rebuild(NEW.lead_id);
        RETURN NULL;
    END IF;
    IF NEW.lead_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO crm_conversation AS c
            (lead_id, business_id, last_message_id, last_message_at, last_channel, last_activity_at, last_inbound_at,
             last_intent)
        VALUES (NEW.lead_id, NEW.business_id, NEW.id, NEW.created_at, NEW.channel, NEW.created_at,
                CASE WHEN NEW.direction = 'in' THEN NEW.created_at END,
                CASE WHEN NEW.direction = 'in' THEN NEW.intent ELSE '' END)
        ON CONFLICT (lead_id) DO UPDATE SET
            last_intent = CASE WHEN NEW.direction = 'in'
                                    AND (c.last_inbound_at IS NULL OR NEW.created_at >= c.last_inbound_at)
                               THEN NEW.intent ELSE c.last_intent END,
            last_message_id = CASE WHEN c.last_message_at IS NULL OR EXCLUDED.last_message_at >= c.last_message_at
                                   THEN EXCLUDED.last_message_id ELSE c.last_message_id END,
            last_channel = CASE WHEN c.last_message_at IS NULL OR EXCLUDED.last_message_at >= c.last_message_at
                                THEN EXCLUDED.last_channel ELSE c.last_channel END,
            last_message_at = GREATEST(c.last_message_at, EXCLUDED.last_message_at),
            last_activity_at = GREATEST(c.last_activity_at, EXCLUDED.last_activity_at),
            last_inbound_at = GREATEST(c.last_inbound_at, EXCLUDED.last_inbound_at)
        RETURNING c.awaiting_since, c.urgent_since INTO waiting, urgent;
        -- The rule runs only where the new message can change its answer (the
        -- upsert holds the row, so what it returned stays true): a role's
        -- automated send never does; nor a message in while an earlier one
        -- already waits (unless it is the first urgent one); nor a person's
        -- message out while nobody waits (a later status change runs it).
        IF NEW.direction = 'in' AND waiting IS NOT NULL AND waiting <= NEW.created_at
           AND (NOT NEW.urgent OR urgent IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        IF NEW.direction = 'in' OR (by_person AND waiting IS NOT NULL) THEN
            PERFORM leadops_conversation_waiting(NEW.lead_id);
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.direction = 'in' AND NEW.intent IS DISTINCT FROM OLD.intent THEN
        -- A later reading (a language model's) of the person's last message.
        UPDATE crm_conversation SET last_intent = NEW.intent
         WHERE lead_id = NEW.lead_id AND last_inbound_at <= NEW.created_at;
    END IF;
    IF (NEW.direction = 'in' AND (NEW.intent IS DISTINCT FROM OLD.intent OR NEW.urgent IS DISTINCT FROM OLD.urgent))
       OR (by_person AND NEW.status IS DISTINCT FROM OLD.status) THEN
        PERFORM leadops_conversation_waiting(NEW.lead_id);
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
"""

CONVERSATION_FUNCTION_DROP = """
DROP FUNCTION IF EXISTS leadops_conversation_note() CASCADE;
DROP FUNCTION IF EXISTS leadops_conversation_open() CASCADE;
DROP FUNCTION IF EXISTS leadops_conversation_rebuild(bigint) CASCADE;
DROP FUNCTION IF EXISTS leadops_conversation_waiting(bigint) CASCADE;
DROP FUNCTION IF EXISTS leadops_conversation_finished() CASCADE;
"""

CONVERSATION_TRIGGER = (
    "CREATE TRIGGER crm_message_conversation AFTER INSERT OR UPDATE OF status, lead_id, intent, urgent ON crm_message "
    "FOR EACH ROW EXECUTE FUNCTION leadops_conversation_note();"
)
CONVERSATION_TRIGGER_DROP = "DROP TRIGGER IF EXISTS crm_message_conversation ON crm_message;"
CONVERSATION_LEAD_TRIGGER = (
    "CREATE TRIGGER crm_lead_conversation AFTER INSERT ON crm_lead "
    "FOR EACH ROW EXECUTE FUNCTION leadops_conversation_open();"
)
CONVERSATION_LEAD_TRIGGER_DROP = "DROP TRIGGER IF EXISTS crm_lead_conversation ON crm_lead;"
# A lead won, lost or disqualified (or reopened): a closing word it had waits
# on no one any more (or again). Fired when the row is written, so a change
# CRM Sync defers to the end of its unit of work counts when it lands; under
# the lead's row lock, then the conversation's (crm.locks' order).
CONVERSATION_FINISHED_TRIGGER = (
    "CREATE TRIGGER crm_lead_conversation_finished AFTER UPDATE OF stage ON crm_lead FOR EACH ROW "
    "WHEN ((OLD.stage IN ('won', 'lost', 'disqualified')) "
    "IS DISTINCT FROM (NEW.stage IN ('won', 'lost', 'disqualified'))) "
    "EXECUTE FUNCTION leadops_conversation_finished();"
)
CONVERSATION_FINISHED_TRIGGER_DROP = "DROP TRIGGER IF EXISTS crm_lead_conversation_finished ON crm_lead;"
