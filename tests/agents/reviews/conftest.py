"""The fixtures of this folder's tests."""

from tests.helpers.revenue import (  # noqa: F401 - fixtures: pytest finds them here
    stripe_secret,
)
