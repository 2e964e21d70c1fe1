"""The fixtures of this folder's tests; they and the helpers several test
files share live in tests/helpers/capture.py."""

from tests.helpers.capture import (  # noqa: F401 - fixtures: pytest finds them here
    website_source,
)
from tests.helpers.twilio import (  # noqa: F401 - fixtures: pytest finds them here
    twilio_settings,
    twilio_source,
)
