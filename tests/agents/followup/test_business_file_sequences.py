"""The business file's `sequences`: the step clock and per-sequence goals."""

from __future__ import annotations

import pytest

from crm.models import Sequence
from crm.services.business_file import BusinessFileError, business_file_parse, business_spec_apply

pytestmark = pytest.mark.django_db

FILE = """\
business: {slug: seq-biz, name: Seq Biz, timezone: America/Chicago}
templates:
  - {key: nudge_sms, channel: sms, approved: true, body: "Hi {first_name}"}
sequences:
  - key: no_reply
    trigger: no_reply
    priority: 90
    goal_stages: [engaged, qualified]
    steps:
      - {after: 15m, channel: sms, template: nudge_sms}
      - {after: 4h, channel: task, title: "Call the lead", clock: business}
"""


def test_sequences_load_with_their_clock_and_goals() -> None:
    business_spec_apply(business_file_parse(FILE))
    sequence = Sequence.objects.get(key="no_reply")
    assert (sequence.trigger, sequence.priority, sequence.goal_stages) == ("no_reply", 90, ["engaged", "qualified"])
    assert sequence.steps == [
        {"after": "15m", "channel": "sms", "template": "nudge_sms"},
        {"after": "4h", "channel": "task", "title": "Call the lead", "clock": "business"},
    ]


@pytest.mark.parametrize(
    ("good", "bad", "line", "message"),
    [
        ("clock: business}", "clock: weekdays}", 11, "bad clock 'weekdays'"),
        ("[engaged, qualified]", "[engaged, nearly]", 8, "bad stage 'nearly' in goal_stages"),
    ],
)
def test_a_bad_clock_or_goal_stage_is_refused_with_its_line(good: str, bad: str, line: int, message: str) -> None:
    with pytest.raises(BusinessFileError) as refused:
        business_file_parse(FILE.replace(good, bad))
    assert refused.value.line == line
    assert message in str(refused.value)
