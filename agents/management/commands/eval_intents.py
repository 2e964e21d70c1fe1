"""`python manage.py eval_intents FILE.csv [--provider all|rules|reader|model]`:
accuracy, macro-F1, precision and recall per intent, the confusion matrix,
revocation recall, false revocations and the promise-leak rate on a labelled
corpus (agents/ai/evaluation.py; the repository's frozen test file is
agents/ai/corpus/test.csv). By default every path there is: the rules, the
trained reader, and the model when LLM_* configures one.

Each path's last line is for machines: `provider=reader accuracy=0.000
macro_f1=0.000 revocation_recall=0.000 false_revocations=0.000
promise_leak_rate=0.000 n=000`. Nothing is left in the database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.ai.client import model_settings
from agents.ai.evaluation import DEFAULT_BUSINESS_FILE, PROVIDERS, corpus_read, evaluate
from crm.services.business_file import BusinessFileError


class Command(BaseCommand):
    help = "Evaluate intents and drafts on a labelled corpus (CSV: text,intent[,previous]): rules, reader, model."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="a CSV with the columns text and intent")
        parser.add_argument(
            "--provider",
            choices=[*PROVIDERS, "all"],
            default="all",
            help="rules, reader (the trained reader production uses), model (whatever LLM_* points at), "
            "or all of those there are (the default; the model only when configured)",
        )
        parser.add_argument(
            "--business",
            default=str(DEFAULT_BUSINESS_FILE),
            help="the business file whose playbook the drafts are checked against (loaded and rolled back)",
        )
        parser.add_argument("--misses", action="store_true", help="list every misread text and every leak")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cases = corpus_read(options["file"])
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        config = model_settings()
        if options["provider"] == "model" and config is None:
            raise CommandError(
                "--provider model needs LLM_PROVIDER and LLM_MODEL (and LLM_BASE_URL for a local server)"
            )
        providers = [options["provider"]]
        if options["provider"] == "all":
            providers = ["rules", "reader", *(["model"] if config is not None else [])]
        for provider in providers:
            try:
                report = evaluate(
                    cases, provider=provider, config=config, business_file=options["business"], path=options["file"]
                )
            except (OSError, BusinessFileError) as exc:
                raise CommandError(f"cannot load the business file: {exc}") from exc
            for line in report.lines(misses=options["misses"]):
                self.stdout.write(line)
