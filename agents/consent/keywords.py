"""Inbound texts that change consent: keywords, revocations in plain words,
and complaints (Twilio's keyword rules).

- Keywords (the whole text, one word, any case and spacing; an opt-out also
  with punctuation around it, "STOP."): opt-out STOP,
  STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT, REVOKE, OPTOUT; opt-in START, YES,
  UNSTOP; help HELP, INFO. The ledger records each. When Twilio already
  answered (the request carried `OptOutType`), we send nothing ourselves;
  otherwise the reading carries the one compliant confirmation owed, which
  agents/outbound/keyword_replies.py sends through the gate (keyed by the
  inbound message id, so a replay never sends a second).
- Free text that reads as a revocation — the plain-word patterns below, or
  the trained reader's recall-first revocation model (agents/reader), which
  counts anything it is unsure about as one — is a revocation: recorded in
  the ledger (basis `plain_words`, with the reader's probability), every
  automated path of the person paused, and answered with the one
  confirmation the rules allow ("You won't get more texts from us. Reply
  START to resume."), never with silence and never with anything else. It
  is read before anything else but the keywords: "stop texting me or I'll
  report you" stops the texts first.
- A complaint ("this is harassment", "reporting you") puts the lead on hold,
  flags it `complaint` and opens a `complaint` approval.

Instagram DMs are read the same way, for their own channel: STOP or START
by DM revokes or restores Instagram DMs in the ledger, and nothing is sent
back (confirmations and HELP are an SMS carrier rule; a DM owes none). So
are messages in a marketplace thread (Thumbtack, Yelp), for that thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from agents.consent.policy import consent_channel
from crm.models import Contact, ContactPoint, ContactPointKind, Lead, Message
from crm.selectors import last_text_to
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.conversations import conversation_settle
from crm.services.receipts import receipt_write

OPT_OUT = {"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "REVOKE", "OPTOUT"}
OPT_IN = {"START", "YES", "UNSTOP"}
HELP = {"HELP", "INFO"}
ACTOR = "agent:consent_check"
# Handles written from inside an app: no SMS carrier rule, no confirmation owed.
DM_KINDS = (ContactPointKind.INSTAGRAM, ContactPointKind.THUMBTACK, ContactPointKind.YELP)

REVOCATION = re.compile(
    r"\b(?:(?:stop|quit|cease)\s+(?:texting|messaging|contacting|calling|sending|emailing|bothering)|"
    r"(?:don'?t|do\s+not|never)\s+(?:(?:call|text|email|message)\s+or\s+|\w+\s+)?(?:text|message|contact|call|email|bother)\s+"
    r"(?:me|us|this\s+number)|off\s+(?:your|the)\s+(?:list|contact\s+list)|enough\s+(?:with\s+)?(?:the\s+)?(?:texts|messages|calls)|"
    r"(?:don'?t|do\s+not)\s+want\s+to\s+be\s+(?:contacted|texted|called|messaged|emailed)|"
    r"take\s+(?:me|this\s+number|my\s+(?:number|name|phone|info\w*))\s+off|"
    r"(?:remove|delete|erase)\s+(?:me|this\s+number|my\s+(?:number|name|phone|info\w*|contact))|"
    r"unsubscrib\w*|opt(?:ing)?[-\s]?out|opt\s+(?:me|us)\s+out|no\s+more\s+(?:messages|texts|calls|emails|contact|texting|calling)|leave\s+me\s+alone|lose\s+my\s+number|"
    r"(?:don'?t|do\s+not)\s+want\s+(?:to\s+(?:receive|get)\s+)?(?:any\s+)?(?:more\s+)?(?:texts|messages|calls|emails)|"
    r"never\s+(?:want\s+to\s+)?hear\s+from\s+you|"
    r"no\s+me\s+(?:vuelvan\s+a\s+\w+|escriban|manden|env[ií]en|contacten|llamen|molesten)|"
    r"no\s+(?:contactarme|escribirme|llamarme|mandarme|enviarme|molestarme)|"
    r"no\s+quiero\s+que\s+me\s+(?:escriban|manden|env[ií]en|contacten|llamen|molesten)|"
    r"(?:dej[ae]n?|paren|dejar)\s+de\s+(?:escrib|envi|mand|llam|contact|molest)\w*|"
    r"(?:qu[ií]t|s[aá]qu|b[oó]rr|elimin)\w*me\s+de|b[oó]rr[ae]nme|de\s+baja|"
    r"no\s+(?:quiero\s+)?(?:recibir\s+)?m[aá]s\s+(?:mensajes|textos|llamadas|correos)|"
    r"no\s+quiero\s+recibir\s+(?:sus\s+)?(?:mensajes|textos|llamadas|correos)|"
    r"basta\s+de\s+(?:mensajes|textos|llamadas)|(?:eliminen|borren|quiten)\s+mi\s+(?:n[uú]mero|tel[eé]fono|nombre))",
    re.IGNORECASE,
)
# "Stop please", "stop it", "Please stop!": a bare stop, not the ledger's
# keyword (whole text, no other word), yet nothing else it could mean.
BARE_STOP = re.compile(
    r"^\W*(?:please\s+|pls\s+)?(?:stop\W*)+(?:\s*(?:please|pls|plz|it|now|already|all)\W*)*$", re.IGNORECASE
)
COMPLAINT = re.compile(
    r"\b(?:harass(?:ment|ing)?|report(?:ing)? you|spam(?:ming)?|scam(?:s|mers?)?|lawyer|attorney|sue you|fcc|bbb|"
    r"acoso|denunciar(?:los|les)?|abogado|estafa(?:dores)?|demandar(?:los|les)?|reportar(?:los|les)?)\b",
    re.IGNORECASE,
)


# Words the recall-first model leans on ("stop", "interested") in the few uses
# that can never mean "stop contacting me": a visit asked for ("stop by"), a
# machine that stopped, a "still interested". Only when nothing else in the
# text speaks of messages, calls or lists — then the model's stop stands.
NOT_A_STOP = re.compile(
    r"\bstop(?:ping)?\s+(?:by|over|in|past)\b"
    r"|\b(?:stopped|stops|quit)\s+(?:working|running|blowing|heating|cooling|leaking|dripping|draining|making|on\s+me)\b"
    r"|\b(?:leak|leaking|drip|dripping|noise|water|it)\s+(?:finally\s+|has\s+)?stopped\b"
    r"|(?<!not\s)(?<!n't\s)(?<!no\s)(?<!longer\s)\b(?:still|very|definitely|yes|am|are|i'?m|we'?re)\s+interested\b",
    re.IGNORECASE,
)
ABOUT_CONTACT = re.compile(
    r"\b(?:text\w*|messag\w*|contact\w*|call(?:s|ing)?|number|list|unsubscrib\w*|remove|alone|bother\w*|spam\w*|"
    r"not\s+interested|no\s+longer|never|report\w*|mensaj\w*|escrib\w*|llam\w*|lista)\b",
    re.IGNORECASE,
)


def plainly_not_a_stop(body: str) -> bool:
    """The text uses a stop word in a sense that is never a stop, and says
    nothing else of messages or contact (the model's stop is overruled)."""
    return bool(NOT_A_STOP.search(body)) and not ABOUT_CONTACT.search(body)


@dataclass(frozen=True)
class Reading:
    kind: str  # opt_out, opt_in, help, revocation, complaint, or ""
    keyword: str = ""
    # The compliance confirmation owed for a keyword or a revocation by text
    # ("" when none: Twilio already answered, a DM, or nothing to confirm).
    reply: str = ""
    # The reader's probability that the text asks us to stop (0: not asked).
    revocation: float = 0.0
    # A revocation that is a complaint too ("stop or I'll report you"): both paths run.
    complaint: bool = False


def read_text(body: str, previous: str = "") -> Reading:
    """What a text changes, as production reads it: the ledger's keywords
    (certain), then a revocation (the patterns, or the trained reader's
    revocation model, `previous` being our last text before it), then a
    complaint."""
    rules = read_text_rules(body)
    if rules.kind in ("opt_out", "opt_in", "help") or not body.strip():
        return rules
    from agents.reader.model import reader

    reading = reader().read(body, previous)
    if rules.kind == "revocation" or (reading.revokes and not plainly_not_a_stop(body)):
        return Reading("revocation", revocation=reading.revocation, complaint=bool(COMPLAINT.search(body)))
    return rules


def certain_stop(body: str) -> bool:
    """A stop the patterns read whatever any model says (a keyword or plain
    words): what training's revocation threshold need not reach."""
    return read_text_rules(body).kind in ("opt_out", "revocation")


def read_text_rules(body: str) -> Reading:
    """The hand-written reading alone (the evaluation's `rules` path)."""
    word = "".join(body.split()).upper()
    # "STOP." and "Stop!" are the keyword too; punctuation is never read
    # into an opt-in ("Yes!" answers a question, it grants nothing).
    bare = re.sub(r"[\W_]+", "", word)
    if word in OPT_OUT or bare in OPT_OUT:
        return Reading("opt_out", bare)
    if word in OPT_IN:
        return Reading("opt_in", word)
    if word in HELP:
        return Reading("help", word)
    if REVOCATION.search(body) or BARE_STOP.match(body):
        return Reading("revocation", complaint=bool(COMPLAINT.search(body)))
    if COMPLAINT.search(body):
        return Reading("complaint")
    return Reading("")


def confirmation_text(kind: str, business_name: str) -> str:
    return {
        "opt_out": (
            f"{business_name}: you are unsubscribed and will get no more texts from us. Reply START to resubscribe."
        ),
        "revocation": f"{business_name}: You won't get more texts from us. Reply START to resume.",
        "opt_in": f"{business_name}: you are resubscribed to texts about your request. Reply STOP to opt out.",
        "help": f"{business_name}: texts about your service request. Msg&data rates may apply. Reply STOP to opt out.",
    }[kind]


def keyword_text_record(*, message: Message, lead: Lead, opt_out_type: str = "") -> Reading:
    """Record what one inbound text already on `lead` changes: the ledger,
    the pause, the complaint. Joins the caller's transaction; safe to run
    again for the same message (replays). Sends nothing: the reading's
    `reply` is the confirmation owed, which the outbound role sends through
    the gate (agents/outbound/keyword_replies.py: `inbound_text_apply`)."""
    from approvals.services import approval_request_open

    reading = read_text(message.body, last_text_to(lead, before=message.created_at))
    point = message.contact_point
    contact = lead.contact
    evidence = {"text": message.body[:500], "message": message.public_id, "opt_out_type": opt_out_type}
    by_dm = point is not None and point.kind in DM_KINDS
    if reading.kind in ("opt_out", "opt_in") and point is not None:
        _record_once(
            point,
            channel=consent_channel(point),
            granted=reading.kind == "opt_in",
            keyword=reading.keyword,
            evidence=evidence,
            message=message,
        )
    if reading.kind in ("opt_out", "opt_in", "help"):
        # A keyword is answered by the compliance reply (ours or Twilio's),
        # or needs none (a DM): it waits for no person in the inbox.
        conversation_settle(lead, actor=ACTOR, reason=f"{reading.keyword}: a keyword", at=message.created_at)
        if opt_out_type or by_dm:
            # Twilio's Advanced Opt-Out already answered: mirror, never reply
            # twice. A DM: nothing is owed back (and HELP means nothing there).
            return reading
        return replace(reading, reply=confirmation_text(reading.kind, lead.business.name))
    if reading.kind == "revocation":
        # Treated as a stop, whatever its words: recorded, paused, and
        # answered with the one confirmation (a wrong reading costs the
        # person one text they can answer START to; a missed one, every text).
        if point is not None:
            _record_once(
                point,
                channel=consent_channel(point),
                granted=False,
                keyword="",
                basis="plain_words",
                evidence={**evidence, "revocation_probability": f"{reading.revocation:.3f}"},
                message=message,
            )
        if not contact.automation_paused:
            _pause(contact, f"the person wrote: {message.body[:200]}")
        conversation_settle(lead, actor=ACTOR, reason="a request to stop, confirmed", at=message.created_at)
        if not by_dm:
            reading = replace(reading, reply=confirmation_text("revocation", lead.business.name))
    if (reading.kind == "complaint" or reading.complaint) and "complaint" not in lead.exceptions:
        if not lead.hold:
            lead_sync.lead_set_hold(lead, True, actor=ACTOR, reason="complaint: a person must look first")
        lead_sync.lead_flag_exception(lead, "complaint", actor=ACTOR, reason=message.body[:200])
        if not contact.automation_paused:
            _pause(contact, "complaint")
        approval_request_open(
            business=lead.business,
            lead=lead,
            kind="complaint",
            proposed_by=ACTOR,
            summary=f"Complaint: “{message.body[:160]}”",
            payload={"message": message.public_id, "body": message.body},
        )
    return reading


def revocation_ask(message: Message, lead: Lead, *, actor: str = ACTOR, why: str = "") -> bool:
    """The safe path of a revocation in plain words: every automated path of
    the person paused at once, and an `opt_out_question` for a person (once
    while the person is paused). `actor` is who read the text as one (the
    consent check, or a language model adding a revocation the rules
    missed). Joins the caller's transaction; True when it paused."""
    from approvals.services import approval_request_open

    contact = lead.contact
    if contact.automation_paused:
        return False
    point = message.contact_point
    _pause(contact, f"the person wrote: {message.body[:200]}", actor=actor)
    approval_request_open(
        business=lead.business,
        lead=lead,
        kind="opt_out_question",
        proposed_by=actor,
        summary=f"{why}Does this mean stop? “{message.body[:160]}”",
        payload={"message": message.public_id, "point": point.value if point else "", "body": message.body},
    )
    return True


def _record_once(
    point: ContactPoint,
    *,
    channel: str,
    granted: bool,
    keyword: str,
    evidence: dict[str, str],
    message: Message,
    basis: str = "keyword",
) -> None:
    if point.consent_events.filter(evidence__message=message.public_id).exists():
        return  # a replay of the same text
    consent_record(
        contact_point=point,
        channel=channel,
        granted=granted,
        basis=basis,
        actor=ACTOR,
        evidence={**evidence, "keyword": keyword} if keyword else evidence,
        inbound_event=message.inbound_event,
    )


def _pause(contact: Contact, reason: str, *, actor: str = ACTOR) -> None:
    Contact.objects.filter(pk=contact.pk).update(automation_paused=True, automation_paused_reason=reason[:300])
    contact.automation_paused = True
    receipt_write(
        business=contact.business,
        subject=contact.public_id,
        actor=actor,
        action="contact.automation_paused",
        reason=reason,
    )
