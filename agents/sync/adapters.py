"""The installed sync adapters: one instance per provider. Another provider
(Housecall Pro, a calendar) is its adapter module and one line here."""

from __future__ import annotations

from agents.sync.base import SyncAdapter
from agents.sync.google_calendar import GoogleCalendarAdapter
from agents.sync.housecall_pro import HousecallProAdapter
from agents.sync.jobber import JobberAdapter
from agents.sync.microsoft_calendar import MicrosoftCalendarAdapter

INSTALLED: tuple[SyncAdapter, ...] = (
    JobberAdapter(),
    HousecallProAdapter(),
    GoogleCalendarAdapter(),
    MicrosoftCalendarAdapter(),
)
