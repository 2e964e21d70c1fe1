"""`manage.py evidence_pack SLUG [--out DIR] [--pdf] [--form-screenshots]`: the
10DLC evidence pack of one business (agents/reporting/evidence_pack.py)
written as JSON — and, with --pdf, as a PDF printed by headless Chromium
(CHROMIUM_PATH, default Debian's /usr/bin/chromium) from the same sections
the back office shows — and its pre-flight printed: what is missing (exit
status 1) or likely refused.

--form-screenshots takes each hosted form as a phone shows it, from the
running server at PUBLIC_BASE_URL (a registration asks to see the opt-in
where the person gives it), as PNGs beside the JSON, named in it and shown
in the PDF. A form the server does not serve is said, not faked."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import requests
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.template.loader import render_to_string
from django.utils import timezone

from agents.reporting.evidence_pack import MISSING, Pack, evidence_pack
from crm.models import Business


class Command(BaseCommand):
    help = "Write a business's 10DLC evidence pack as JSON and print its pre-flight (exit 1 when something is missing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("business", help="the business's slug")
        parser.add_argument("--out", default=".", help="the folder the JSON file goes to (default: here)")
        parser.add_argument("--pdf", action="store_true", help="also print it as a PDF with headless Chromium")
        parser.add_argument(
            "--form-screenshots",
            action="store_true",
            help="also take each hosted form as a phone shows it, from the server at PUBLIC_BASE_URL",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        business = Business.objects.filter(slug=options["business"]).first()
        if business is None:
            raise CommandError(f"no business {options['business']!r}")
        folder = Path(options["out"])
        if not folder.is_dir():
            raise CommandError(f"{folder} is not a folder")
        pack = evidence_pack(business, now=timezone.now(), base_url=settings.PUBLIC_BASE_URL)
        if options["form_screenshots"]:
            pack = self._with_screenshots(pack, folder, business.slug)
        target = folder / f"{business.slug}-10dlc-evidence.json"
        target.write_text(json.dumps(pack.as_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        self.stdout.write(f"evidence pack: {target}")
        if options["pdf"]:
            pdf = folder / f"{business.slug}-10dlc-evidence.pdf"
            _print_pdf(pack, pdf, folder)
            self.stdout.write(f"evidence pack: {pdf}")
        self.stdout.write(
            f"  {len(pack.forms)} form sources, {len(pack.samples)} sample messages, "
            f"{sum(n for _, n in pack.volume)} texts in 30 days, {len(pack.consent)} consent records"
        )
        if not pack.findings:
            self.stdout.write(self.style.SUCCESS("pre-flight: nothing missing or likely to be refused"))
            return
        self.stdout.write("pre-flight:")
        for finding in pack.findings:
            self.stdout.write(f"  {finding.level:<8}{finding.what}: {finding.why}")
        if any(f.level == MISSING for f in pack.findings):
            raise CommandError("the registration would be refused: fix what is missing first", returncode=1)

    def _with_screenshots(self, pack: Pack, folder: Path, slug: str) -> Pack:
        forms = []
        for form in pack.forms:
            if not form.url:
                forms.append(form)
                continue
            target = folder / f"{slug}-form-{form.source}.png"
            problem = _screenshot(form.url, target)
            if problem:
                self.stderr.write(f"form {form.source}: no screenshot: {problem}")
                forms.append(form)
                continue
            self.stdout.write(f"form {form.source}: {target}")
            forms.append(dataclasses.replace(form, screenshot=target.name))
        return dataclasses.replace(pack, forms=forms)


# Chromium's own switches for a headless run that reaches nothing outside.
CHROMIUM_SWITCHES = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-pdf-header-footer",
)


# A phone's width: how most people meet a hosted form.
PHONE_WINDOW = "--window-size=430,932"


def _chromium() -> str:
    chromium = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
    if not Path(chromium).exists():
        raise CommandError(f"needs Chromium at {chromium} (apt-get install chromium, or set CHROMIUM_PATH)")
    return chromium


def _screenshot(url: str, target: Path) -> str:
    """Take the page at `url` as a phone shows it; "" or what went wrong."""
    try:
        answer = requests.get(url, timeout=10)
    except requests.RequestException as exc:
        return f"{url} cannot be reached ({exc.__class__.__name__}): is the server running at PUBLIC_BASE_URL?"
    if answer.status_code != 200:
        return f"{url} answered {answer.status_code}"
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            _chromium(),
            *CHROMIUM_SWITCHES,
            f"--user-data-dir={Path(scratch) / 'profile'}",
            PHONE_WINDOW,
            "--hide-scrollbars",
            f"--screenshot={target.resolve()}",
            url,
        ]
        try:
            subprocess.run(command, check=True, capture_output=True, timeout=90)  # noqa: S603 - our own argv
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            return f"Chromium could not take it: {exc}"
    return "" if target.exists() and target.stat().st_size > 0 else "Chromium wrote no image"


def _print_pdf(pack: Pack, target: Path, folder: Path) -> None:
    chromium = _chromium()
    missing = sum(1 for f in pack.findings if f.level == MISSING)
    # The screenshots beside the JSON, by form, for the printed page to show.
    shots = {f.source: (folder / f.screenshot).resolve().as_uri() for f in pack.forms if f.screenshot}
    # A printed page has no viewer: its times are the business's.
    with timezone.override(ZoneInfo(pack.business["timezone"])):
        html = render_to_string(
            "leadops/compliance/evidence_print.html", {"pack": pack, "missing": missing, "shots": shots}
        )
    with tempfile.TemporaryDirectory() as scratch:
        page = Path(scratch) / "pack.html"
        page.write_text(html, encoding="utf-8")
        profile = Path(scratch) / "profile"
        command = [
            chromium,
            *CHROMIUM_SWITCHES,
            f"--user-data-dir={profile}",
            f"--print-to-pdf={target.resolve()}",
            page.as_uri(),
        ]
        try:
            subprocess.run(command, check=True, capture_output=True, timeout=90)  # noqa: S603 - our own argv
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise CommandError(f"Chromium could not print the PDF: {exc}") from exc
    if not target.exists() or target.stat().st_size == 0:
        raise CommandError("Chromium printed no PDF")
