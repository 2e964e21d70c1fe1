"""The fixtures of this folder's tests; they and the helpers several test
files share live in tests/helpers/revenue.py."""

from tests.helpers.revenue import (  # noqa: F401 - fixtures: pytest finds them here
    stripe_secret,
)
