"""The manager's exception report in words: what each kind of item is and
what to do next, so a person reads "Payment not matched to a lead — open it
and pick the lead it pays for" rather than `unmatched_payment`.

One entry per kind the product opens (Pipeline QA's checks and the roles'
own items); a kind not listed still reads as words, never as its code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KindWords:
    label: str
    next_step: str


WORDS: dict[str, KindWords] = {
    # Pipeline QA (agents/reporting/pipeline_qa.py)
    "no_owner": KindWords("No owner", "Assign the lead to a setter."),
    "manager_queue": KindWords("No one could take it", "Assign it yourself, or widen the routing rules."),
    "missing_identity": KindWords("No way to reach them", "Find a phone or email, or close the lead."),
    "out_of_area": KindWords("Outside the service area", "Decide whether to book it anyway, or refer it on."),
    "no_next_action": KindWords("No next action", "Set what happens next and when, or close the lead."),
    "invalid_stage": KindWords("Stage does not match its records", "Set the stage the records show."),
    "stale_stage": KindWords("Nobody is on it", "Call the person, or set a next action or close the lead."),
    "sla_breached": KindWords("First response late", "Call them now; then see why the alert was missed."),
    "stuck_enrollment": KindWords("Follow-up stuck", "Open the path: resume it or stop it."),
    "undelivered_message": KindWords("A text did not arrive", "Try another number or a call."),
    "stuck_message": KindWords("A send is stuck", "Check the provider's status; the sweep retries it."),
    "unmatched_payment": KindWords("Payment not matched to a lead", "Open it and pick the lead it pays for."),
    "appointment_no_outcome": KindWords("Visit without an outcome", "Mark it held or a no-show."),
    "job_not_invoiced": KindWords("Job done, not invoiced", "Issue the invoice."),
    # The roles' own items
    "sms_health": KindWords("Automated texts paused", "Fix the text or step named, then resume the sequence."),
    "send_gave_up": KindWords("A send was given up", "Send it again by hand, or reach them another way."),
    "webhook_dead": KindWords("Webhook endpoint failing", "Check the receiving system, then replay."),
    "webhook_paused": KindWords("Webhook deliveries paused", "Fix the endpoint, then resume it."),
    "conversion_failed": KindWords("Ad conversion not uploaded", "Check the ad account's access, then retry."),
    "sync_failed": KindWords("Sync failed", "Read the error; retry once the other system answers."),
    "sync_reconnect": KindWords("Connection needs a reconnect", "Reconnect it on the Connections page."),
    "calendar_busy_stale": KindWords("Calendar not read lately", "Reconnect the calendar, or check its account."),
    "spend_currency": KindWords("Ad account in another currency", "Use an account in the business's currency."),
    "spend_token": KindWords("Ad spend could not be read", "Reconnect the ad account's access."),
}


def kind_words(kind: str) -> KindWords:
    found = WORDS.get(kind)
    if found is not None:
        return found
    return KindWords(kind.replace("_", " ").capitalize(), "Open it and decide.")
