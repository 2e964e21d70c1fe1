"""The fixtures of this folder's tests; they and the helpers several test
files share live in tests/helpers/webhooks.py."""

from tests.helpers.webhooks import live  # noqa: F401 - a fixture: pytest finds it here
