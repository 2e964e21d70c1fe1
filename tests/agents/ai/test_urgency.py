"""The urgency reader: emergencies in English and Spanish go first; a plain
question, a booking or a negated "not urgent" does not. And a reply that
picks a time is read as booking."""

from __future__ import annotations

import pytest

from agents.ai.intents import intent_by_rules
from agents.ai.urgency import message_urgent, urgent_read
from crm.models import Business

URGENT = [
    "there's water pouring into the basement right now",
    "water is pooling under the heater, can someone come today?",
    "Pipe burst in the kitchen!!",
    "I smell gas near the furnace",
    "the outlet is sparking",
    "no heat and we have a newborn at home",
    "AC died and my mom is 87, it's 98 degrees inside",
    "our CO detector is going off",
    "sewage is backing up into the tub",
    "hay agua por todas partes en el sótano",
    "huele a gas en la cocina",
    "sin calefacción y tenemos un bebé",
    "es urgente, necesito a alguien hoy mismo",
]
NOT_URGENT = [
    "are you open on sundays?",
    "How much for a tune-up?",
    "saturday morning is fine for us",
    "no rush, whenever you have time next week",
    "not urgent but the furnace makes a noise",
    "thanks, we went with them",
    "¿cuánto cuesta una revisión?",
    "no es urgente, cuando puedan",
]


@pytest.mark.parametrize("text", URGENT)
def test_an_emergency_reads_as_urgent(text):
    assert urgent_read(text), text


@pytest.mark.parametrize("text", NOT_URGENT)
def test_an_ordinary_message_does_not(text):
    assert not urgent_read(text), text


@pytest.mark.django_db
def test_a_business_adds_its_own_emergency_words(business: Business):
    assert not message_urgent(business, "the sump pump alarm is beeping")
    business.scope_keywords = {"emergency": ["sump pump alarm"]}
    business.save()
    assert message_urgent(business, "the sump pump alarm is beeping")


@pytest.mark.parametrize(
    "text",
    [
        "saturday morning is fine for us",
        "thursday evening is good for me",
        "Friday works, any time before noon",
        "Tuesday at 3pm works for us",
        "el sábado en la mañana está bien",
        "El jueves por la mañana, por favor.",
        "Tuesday morning please",
    ],
)
def test_a_reply_that_picks_a_time_reads_as_booking(text):
    assert intent_by_rules(text).intent == "booking_request", text
