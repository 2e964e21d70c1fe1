"""Settings for the test suite and the type checker: production settings plus a
throwaway SECRET_KEY, so `pytest` and `mypy` run on a fresh clone with nothing
set. An explicit SECRET_KEY in the environment still wins.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-insecure-key-never-use-it-to-serve-anything-0123456789")

from leadops.settings import *  # noqa: F403
