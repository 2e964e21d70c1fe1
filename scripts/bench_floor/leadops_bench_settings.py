"""Settings for the benchmarks' web server only: the production settings of
whichever checkout gunicorn runs, plus the floor endpoint's URLs. This
directory goes on PYTHONPATH of the server a benchmark starts; no production
URL module knows the floor."""

from leadops.settings import *  # noqa: F403

ROOT_URLCONF = "leadops_bench_urls"
