"""The fixtures of this folder's tests; they and the helpers several test
files share live in tests/helpers/followup.py."""

from tests.helpers.followup import (  # noqa: F401 - fixtures: pytest finds them here
    lead,
    manager,
    owner,
    playbook,
)
