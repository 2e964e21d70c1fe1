"""The claims guard: what it must find, and the playbook's ordinary sentences
it must leave alone. Pure functions: no database."""

from __future__ import annotations

import pytest

from agents.playbook.claims_guard import ClaimKind, Finding, claim_kinds, claims_scan

PRICE, DISCOUNT, WARRANTY = ClaimKind.PRICE, ClaimKind.DISCOUNT, ClaimKind.WARRANTY
ARRIVAL, DIAGNOSIS = ClaimKind.ARRIVAL_TIME, ClaimKind.LICENSED_DIAGNOSIS

FOUND = [
    # prices and money amounts
    ("The visit is $199.", PRICE, "$199"),
    ("A tune-up runs $ 1,299.99 for the whole system.", PRICE, "$ 1,299.99"),
    ("That would be 199 dollars for the diagnostic.", PRICE, "be 199 dollars"),
    ("It comes to about 80 bucks.", PRICE, "comes to about 80 bucks"),
    ("We charge USD 50 for the trip.", PRICE, "USD 50"),
    ("Der Service kostet €30.", PRICE, "€30"),
    ("Son 30€ por la visita.", PRICE, "30€"),
    ("Our price is 150 for that.", PRICE, "price is 150"),
    ("The fee is 75.", PRICE, "fee is 75"),
    ("Service calls cost as low as 49.", PRICE, "as low as 49"),
    ("El precio es 150 por la visita.", PRICE, "precio es 150"),
    ("Son 200 dólares.", PRICE, "200 dólares"),
    ("Cuesta 90 pesos.", PRICE, "Cuesta 90 pesos"),
    # discounts and free offers
    ("Get 20% off your first service.", DISCOUNT, "20% off"),
    ("Take 15 percent off this month.", DISCOUNT, "15 percent off"),
    ("We can give you a discount.", DISCOUNT, "discount"),
    ("Filters are half price this week.", DISCOUNT, "half price"),
    ("We offer free estimates.", DISCOUNT, "free estimates"),
    ("The inspection is free of charge.", DISCOUNT, "free of charge"),
    ("Use promo code WINTER.", DISCOUNT, "promo code"),
    ("La revisión es gratis.", DISCOUNT, "gratis"),
    ("Tenemos un 10% de descuento.", DISCOUNT, "descuento"),
    # warranties and guarantees
    ("All parts come with a warranty.", WARRANTY, "warranty"),
    ("Your repair is guaranteed.", WARRANTY, "guaranteed"),
    ("We guarantee our work.", WARRANTY, "guarantee"),
    ("Lifetime coverage on labor.", WARRANTY, "Lifetime"),
    ("Incluye garantía de un año.", WARRANTY, "garantía"),
    # arrival and completion times
    ("We'll be there at 3pm.", ARRIVAL, "We'll be there"),
    ("The tech arrives around 3 pm.", ARRIVAL, "arrives"),
    ("We can have it done by tomorrow.", ARRIVAL, "We can have it done"),
    ("Someone can be over within 2 hours.", ARRIVAL, "Someone can be over"),
    ("We will finish by Friday.", ARRIVAL, "We will finish"),
    ("Your ETA is 20 minutes.", ARRIVAL, "ETA"),
    ("See you at 3:30.", ARRIVAL, "3:30"),
    ("A technician is on the way.", ARRIVAL, "on the way"),
    ("We can fix it today.", ARRIVAL, "today"),
    ("Same-day service is available.", ARRIVAL, "Same-day"),
    ("We'll come back in a couple of days.", ARRIVAL, "in a couple of days"),
    ("The job will be complete by the end of the week.", ARRIVAL, "by the end of the week"),
    ("Llegamos mañana a las 3.", ARRIVAL, "Llegamos"),
    ("Estamos ahí en 2 horas.", ARRIVAL, "en 2 horas"),
    # diagnoses of licensed work
    ("Your compressor is dead.", DIAGNOSIS, "Your compressor is dead"),
    ("It's a gas leak.", DIAGNOSIS, "It's a gas leak"),
    ("The wiring is faulty.", DIAGNOSIS, "The wiring is faulty"),
    ("The house needs a new breaker panel.", DIAGNOSIS, "needs a new breaker panel"),
    ("That unit needs to be replaced.", DIAGNOSIS, "needs to be replaced"),
    ("Sounds like a bad capacitor.", DIAGNOSIS, "Sounds like a bad capacitor"),
    ("Your heat exchanger is probably cracked.", DIAGNOSIS, "Your heat exchanger is probably cracked"),
    ("The panel is not up to code.", DIAGNOSIS, "is not up to code"),
    ("Your water heater’s shot.", DIAGNOSIS, "Your water heater’s shot"),
]

NOT_FOUND = [
    "Reply STOP to opt out.",
    "We got your request.",
    "What time works for you?",
    "Hi Pat, this is Acme Heating & Air. We got your request and Sam will reach out shortly. Reply STOP to opt out.",
    "Is now a good time to talk about your HVAC?",
    "Reply with a good time to call.",
    "Feel free to call us back.",
    "Call our toll-free number.",
    "Are you free to talk?",
    "When are you free?",
    "Call us at (555) 010-0199.",
    "Your request number is 4412.",
    "Can you send a photo of the unit?",
    "What is the model number on your furnace?",
    "How old is your water heater?",
    "Sam will call you to go over pricing.",
    "Do you own or rent the home?",
    "Reply C to confirm or R to reschedule.",
    "If you need a new time, just reply here.",
    "Is the wiring in the basement?",
    "Thanks for reaching out!",
    "Gracias por contactarnos. Responda STOP para no recibir mensajes.",
    "How many hours a day does it run?",
    "We serve the 60601 area.",
]


@pytest.mark.parametrize(("text", "kind", "excerpt"), FOUND)
def test_the_guard_finds_each_kind_of_claim_with_its_words(text: str, kind: ClaimKind, excerpt: str) -> None:
    findings = claims_scan(text)

    assert Finding(kind=kind.value, excerpt=excerpt) in findings


@pytest.mark.parametrize("text", NOT_FOUND)
def test_ordinary_playbook_sentences_make_no_claim(text: str) -> None:
    assert claims_scan(text) == []


def test_findings_come_in_the_order_they_appear_in_the_text() -> None:
    text = "Your compressor is dead; we'll replace it for $1,200 with a 10 year warranty, done by Friday."

    assert claim_kinds(claims_scan(text)) == ["licensed_diagnosis", "price", "warranty", "arrival_time"]


def test_one_amount_seen_by_several_rules_is_one_finding() -> None:
    assert claims_scan("The price is $150.") == [Finding(kind="price", excerpt="price is $150")]


def test_matching_ignores_case() -> None:
    assert claim_kinds(claims_scan("FREE ESTIMATE, WARRANTY INCLUDED, ETA TOMORROW")) == [
        "discount",
        "warranty",
        "arrival_time",
    ]


def test_words_inside_other_words_are_not_claims() -> None:
    # "beta", "freedom", "warrantless" hide the words only as parts of others.
    assert claims_scan("Our beta app gives you freedom to reschedule.") == []


def test_empty_text_has_no_findings() -> None:
    assert claims_scan("") == []
