"""Settings for the test suite and the type checker: production settings plus a
throwaway SECRET_KEY, so `pytest` and `mypy` run on a fresh clone with nothing
set (an explicit SECRET_KEY in the environment still wins), and two things
that only make the suite faster: a cheap password hasher and the test app.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-insecure-key-never-use-it-to-serve-anything-0123456789")

from django.conf import global_settings

from leadops.settings import *  # noqa: F403

# The default hasher is slow on purpose (0.3 s a password on two cores), and
# the suite hashes about two thousand (users made, logins): MD5 makes the new
# hashes in tests, which took the suite from 22 to 13.5 minutes.
# The production hashers stay listed, so a hash made by a process running the
# production settings (a test's subprocess) still verifies here.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS]

# First, so that its `flush` (tests/management/commands/flush.py: the one
# between transactional tests) is found before crm's.
INSTALLED_APPS = ["tests", *INSTALLED_APPS]  # noqa: F405
