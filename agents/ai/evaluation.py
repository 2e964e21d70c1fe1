"""The evaluation of intents and drafts on a labelled corpus
(`python manage.py eval_intents FILE.csv`, docs/ai.md).

For each text of the corpus (columns `text`, `intent`, and optionally
`previous`: our last text before it), the path under test reads its intent
and drafts the reply a business would get:

- `rules`: the hand-written patterns alone (agents/ai/intents.py,
  `intent_by_rules`) and the rules drafter's reply (the approved template
  for what was asked, or a person);
- `reader`: what production stores (`intent_read`: the ledger's keywords,
  the consent check's revocation and complaint with the trained reader's
  revocation model, then the trained intent model), and the same drafter;
- `model`: the configured model through `understand` (the same prompt,
  schema and grounding as in production), its intent kept as
  `intent_merged` keeps it (a revocation the rules found stands), its draft
  checked by the assistant's `model_text_verdict`; a failed call falls back
  to the rules, as it does in production.

What it measures:

- accuracy, macro-F1, precision and recall per intent, the confusion
  matrix (agents/reader/metrics.py);
- revocation recall: of the texts labelled `revocation`, the share read as
  one, apart for the ledger's keywords (STOP, UNSUBSCRIBE…, `is_ledger_keyword`)
  and for revocations in plain words; and the false revocation rate;
- the promise-leak rate: drafts that would reach the customer without a
  person with a price, discount, warranty, time or diagnosis that no
  playbook fact states, over all texts. As a worst case, auto-reply counts
  as on for every intent a business may turn it on for: a model draft
  reaches the customer whenever the claims guard passed it.

The playbook is the business file's (default demo/acme-hvac.yaml), loaded
under a throwaway slug and without its sources (whose keys may be taken in
this database) into a transaction that is rolled back: the evaluation
leaves nothing in the database and runs on any database. The model is called outside that transaction; its calls are
counted in the report, not in any business's monthly calls.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from agents.ai.calls import Understanding, understand
from agents.ai.client import ModelFailure, ModelSettings
from agents.ai.drafter import proposal_of
from agents.ai.grounding import Grounding, Turn, redact
from agents.ai.intents import (
    INTENTS,
    MODEL,
    NOT_DRAFTED,
    REVOCATION,
    IntentReading,
    intent_by_rules,
    intent_merged,
    intent_read,
    is_ledger_keyword,
)
from agents.playbook.assistant import Draft, draft_reply, model_text_verdict
from agents.playbook.claims_guard import Finding, claims_unbacked
from agents.playbook.facts import Fact, business_links, playbook_facts
from agents.playbook.templates import playbook_context
from agents.reader.corpus import examples_read
from agents.reader.metrics import Scores, scores
from crm.services.business_file import business_file_parse, business_spec_apply
from crm.services.records import contact_create, lead_open
from crm.validation import AUTO_REPLY_INTENTS

DEFAULT_BUSINESS_FILE = Path(__file__).resolve().parents[2] / "demo" / "acme-hvac.yaml"
PROVIDERS = ("rules", "reader", "model")


@dataclass(frozen=True)
class Case:
    text: str
    intent: str
    line: int
    previous: str = ""


def corpus_read(path: str | Path) -> list[Case]:
    """The labelled texts of a CSV with the columns `text` and `intent` (and
    optionally `previous`). Raises ValueError naming the line of a bad row."""
    return [Case(e.text, e.intent, e.line, e.previous) for e in examples_read(path)]


@dataclass(frozen=True)
class Playbook:
    """What the drafts are checked against, read once from the business file."""

    business: str
    facts: dict[str, str]  # id -> text
    values: dict[str, str]  # the placeholders' values for the evaluation's lead
    rules_drafts: dict[str, Draft]  # text -> the rules drafter's checked draft


@dataclass
class Outcome:
    case: Case
    reading: IntentReading
    draft_body: str
    reached: bool  # would reach the customer without a person
    leaked: list[Finding]
    why: str
    fallback: str = ""


@dataclass
class Report:
    provider: str
    path: str
    outcomes: list[Outcome] = field(default_factory=list)
    calls: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    tokens_in: int = 0
    tokens_out: int = 0

    @property
    def n(self) -> int:
        return len(self.outcomes)

    def per_intent(self) -> dict[str, tuple[int, int]]:
        totals: dict[str, tuple[int, int]] = {}
        for intent in INTENTS:
            mine = [o for o in self.outcomes if o.case.intent == intent]
            totals[intent] = (len(mine), sum(o.reading.intent == intent for o in mine))
        return totals

    @property
    def accuracy(self) -> float:
        return _share(sum(o.reading.intent == o.case.intent for o in self.outcomes), self.n)

    @property
    def scores(self) -> Scores:
        return scores([o.case.intent for o in self.outcomes], [o.reading.intent for o in self.outcomes])

    def recall(self, *, keywords: bool | None = None) -> tuple[int, int]:
        """(found, labelled) revocations; keywords True/False: only the
        ledger's keywords / only plain words; None: both."""
        labelled = [o for o in self.outcomes if o.case.intent == REVOCATION]
        if keywords is not None:
            labelled = [o for o in labelled if is_ledger_keyword(o.case.text) == keywords]
        return sum(o.reading.intent == REVOCATION for o in labelled), len(labelled)

    @property
    def leaks(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.reached and o.leaked]

    @property
    def leak_rate(self) -> float:
        return _share(len(self.leaks), self.n)

    def lines(self, *, misses: bool = False) -> list[str]:
        measured = self.scores
        out = [f"eval_intents: {self.n} texts from {self.path}; provider: {self.provider}"]
        out += measured.lines()
        kw, kw_n = self.recall(keywords=True)
        free, free_n = self.recall(keywords=False)
        out.append(
            f"revocation recall: ledger keywords {kw}/{kw_n} ({_share(kw, kw_n):.3f}), "
            f"plain words {free}/{free_n} ({_share(free, free_n):.3f})"
        )
        reached = sum(o.reached for o in self.outcomes)
        out.append(
            f"promise leaks: {len(self.leaks)} of {self.n} drafts ({reached} would reach the customer without a "
            "person, auto-reply assumed on; the others wait for a person or are not drafted)"
        )
        if self.provider == "model":
            failed = ", ".join(f"{kind} {n}" for kind, n in sorted(self.failures.items())) or "none"
            out.append(
                f"model calls: {self.calls}, failed {sum(self.failures.values())} ({failed}; the rules answered "
                f"those); tokens in {self.tokens_in}, out {self.tokens_out}"
            )
        if misses:
            for o in self.outcomes:
                if o.reading.intent != o.case.intent:
                    out.append(f"  line {o.case.line}: {o.case.intent} read as {o.reading.intent}: {o.case.text!r}")
            for o in self.leaks:
                said = ", ".join(f"{f.kind} “{f.excerpt}”" for f in o.leaked)
                out.append(f"  line {o.case.line}: LEAK {said}: {o.draft_body!r}")
        revocations, labelled = self.recall()
        out.append(
            f"provider={self.provider} accuracy={self.accuracy:.3f} macro_f1={measured.macro_f1:.3f} "
            f"revocation_recall={_share(revocations, labelled):.3f} "
            f"false_revocations={measured.false_revocations:.3f} promise_leak_rate={self.leak_rate:.3f} n={self.n}"
        )
        return out


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def playbook_load(cases: list[Case], business_file: str | Path = DEFAULT_BUSINESS_FILE) -> Playbook:
    """Load the business file under a throwaway slug, read its facts and the
    rules' draft for every text, and roll it all back."""
    text = Path(business_file).read_text(encoding="utf-8")
    spec = business_file_parse(text, path=str(business_file))
    spec.slug = f"eval-{uuid.uuid4().hex[:12]}"
    # The playbook needs no source, and the file's keys may belong to another
    # business in this database (keys are unique across businesses).
    spec.sources = []
    with transaction.atomic():
        business = business_spec_apply(spec, actor="eval_intents").business
        contact = contact_create(business=business, actor="eval_intents", first_name="Alex", phones=["+13125550177"])
        lead = lead_open(contact=contact, actor="eval_intents", touch={"channel": "sms"})
        facts = {fact.id: fact.text for fact in playbook_facts(business)}
        link, phone = business_links(business)
        values = {"business": business.name, **playbook_context(lead)}
        values.update({k: v for k, v in (("booking_url", link), ("business_phone", phone)) if v})
        drafts = {case.text: draft_reply(lead, case.text) for case in cases}
        playbook = Playbook(business.name, facts, values, drafts)
        transaction.set_rollback(True)
    return playbook


def evaluate(
    cases: list[Case],
    *,
    provider: str = "rules",
    config: ModelSettings | None = None,
    business_file: str | Path = DEFAULT_BUSINESS_FILE,
    path: str = "",
) -> Report:
    """Read and draft every case along `provider`'s path (see the module)."""
    if provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}, not {provider!r}")
    if provider == "model" and config is None:
        raise ValueError("the model path needs LLM_PROVIDER and LLM_MODEL set (docs/ai.md)")
    playbook = playbook_load(cases, business_file)
    report = Report(provider=provider, path=path)
    for case in cases:
        rules = intent_by_rules(case.text) if provider == "rules" else intent_read(case.text, case.previous)
        if provider in ("rules", "reader") or config is None:
            report.outcomes.append(_rules_outcome(case, rules, playbook))
            continue
        report.calls += 1
        try:
            understanding = understand(_grounding(case, playbook), config)
        except ModelFailure as failure:
            report.failures[failure.kind] += 1
            report.tokens_in += failure.usage.input_tokens
            report.tokens_out += failure.usage.output_tokens
            report.outcomes.append(_rules_outcome(case, rules, playbook, fallback=failure.kind))
            continue
        report.tokens_in += understanding.usage.input_tokens
        report.tokens_out += understanding.usage.output_tokens
        report.outcomes.append(_model_outcome(case, rules, understanding, playbook, config.label))
    return report


def _grounding(case: Case, playbook: Playbook) -> Grounding:
    return Grounding(
        business=playbook.business,
        facts=tuple(Fact(fact_id, text) for fact_id, text in playbook.facts.items()),
        lead={"stage": "new"},
        conversation=(Turn("customer", redact(case.text)),),
        message=redact(case.text),
        values=playbook.values,
    )


def _rules_outcome(case: Case, rules: IntentReading, playbook: Playbook, *, fallback: str = "") -> Outcome:
    draft = playbook.rules_drafts[case.text]
    # Nobody drafts an answer to a revocation, a complaint, a wrong number or spam.
    reached = rules.intent not in NOT_DRAFTED and bool(draft.body.strip()) and not draft.needs_person
    # An approved template, unmodified, is the playbook's own text.
    leaked = [] if draft.unmodified_approved else claims_unbacked(draft.body, list(playbook.facts.values()))
    return Outcome(case, rules, draft.body, reached, leaked if reached else [], draft.reason, fallback)


def _model_outcome(
    case: Case, rules: IntentReading, understanding: Understanding, playbook: Playbook, author: str
) -> Outcome:
    kept = intent_merged(rules, IntentReading(understanding.intent, understanding.confidence, MODEL))
    grounding = _grounding(case, playbook)
    proposal = proposal_of(understanding, grounding, author)
    verdict = model_text_verdict(proposal.body, proposal.facts, playbook.facts, author=author, problem=proposal.problem)
    drafted = kept.intent not in NOT_DRAFTED and bool(proposal.body.strip())
    reached = drafted and verdict.auto_ok and kept.intent in AUTO_REPLY_INTENTS
    leaked = claims_unbacked(proposal.body, list(playbook.facts.values())) if reached else []
    return Outcome(case, kept, proposal.body, reached, leaked, verdict.reason)
