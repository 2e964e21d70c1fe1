"""The fixtures of this folder's tests; they and the helpers several test
files share live in tests/helpers/booking.py."""

from tests.helpers.booking import (  # noqa: F401 - fixtures: pytest finds them here
    lead,
    rule,
    shop,
    tech,
    templates,
)
