"""The fixtures of this folder's tests; they and the helpers several test
files share live in tests/helpers/reporting.py."""

from tests.helpers.reporting import (  # noqa: F401 - fixtures: pytest finds them here
    owner,
    source,
)
