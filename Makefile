# LeadOps: `make run` to start the back office, `make test` to check it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

# The demo's and the tests' own throwaway key (it is public: never serve real
# data with it). Django refuses to start without SECRET_KEY when DEBUG is off;
# a key in the environment or in .env wins.
ifeq ($(shell grep -s '^SECRET_KEY=' .env),)
export SECRET_KEY ?= demo-only-insecure-key-never-use-it-to-serve-anything-0123456789
endif

# Compiled bytecode is kept under .venv, outside the source tree, even where
# PYTHONDONTWRITEBYTECODE is set (containers often set it, to keep images
# and trees free of __pycache__): without a cache every process compiles each
# module it imports again, and `make run` starts several, the suite dozens.
# `manage.py check` took 2.4 s of CPU that way, 0.9 s with the cache.
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test lint check pytest migrate demo simulate stop-db reset clean upgrade

# What the product runs on, for `make run`; the test and lint tools on top,
# for `make test` (scripts/install-requirements: uv, pip as the fallback).
$(STAMP): requirements.txt scripts/install-requirements
	scripts/install-requirements $(PYTHON) $(VENV) requirements.txt
	touch $(STAMP)

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	scripts/install-requirements $(PYTHON) $(VENV) requirements-dev.txt
	touch $(DEV_STAMP)

migrate: $(STAMP)
	$(PY) manage.py migrate --no-input
	$(PY) manage.py collectstatic --no-input -v0

demo: migrate
	$(PY) manage.py load_demo

# Demo-only provider secrets, so `simulate` can sign what the demo server
# checks; set the real ones in the environment (or .env) to go live.
DEMO_ENV := META_APP_SECRET=$${META_APP_SECRET:-demo-meta-app-secret} \
	META_VERIFY_TOKEN=$${META_VERIFY_TOKEN:-demo-meta-verify-token} \
	META_GRAPH_URL=$${META_GRAPH_URL:-http://127.0.0.1:8765} \
	TWILIO_AUTH_TOKEN=$${TWILIO_AUTH_TOKEN:-demo-twilio-auth-token} \
	STRIPE_WEBHOOK_SECRET=$${STRIPE_WEBHOOK_SECRET:-whsec_demo_stripe_webhook_secret} \
	CALENDLY_SIGNING_KEY=$${CALENDLY_SIGNING_KEY:-demo-calendly-signing-key} \
	THUMBTACK_API_URL=$${THUMBTACK_API_URL:-http://127.0.0.1:8768} \
	YELP_API_URL=$${YELP_API_URL:-http://127.0.0.1:8768} \
	JOBBER_API_URL=$${JOBBER_API_URL:-http://127.0.0.1:8769} \
	JOBBER_AUTH_URL=$${JOBBER_AUTH_URL:-http://127.0.0.1:8769} \
	JOBBER_CLIENT_ID=$${JOBBER_CLIENT_ID:-jobber-app-client-id} \
	JOBBER_CLIENT_SECRET=$${JOBBER_CLIENT_SECRET:-jobber-app-client-secret-0123456789} \
	GOOGLE_CALENDAR_API_URL=$${GOOGLE_CALENDAR_API_URL:-http://127.0.0.1:8770/calendar/v3} \
	GOOGLE_OAUTH_URL=$${GOOGLE_OAUTH_URL:-http://127.0.0.1:8770/o/oauth2/v2/auth} \
	GOOGLE_TOKEN_URL=$${GOOGLE_TOKEN_URL:-http://127.0.0.1:8770/token} \
	GOOGLE_CALENDAR_CLIENT_ID=$${GOOGLE_CALENDAR_CLIENT_ID:-gcal-client-id.apps.googleusercontent.com} \
	GOOGLE_CALENDAR_CLIENT_SECRET=$${GOOGLE_CALENDAR_CLIENT_SECRET:-gcal-client-secret-0123456789} \
	GOOGLE_BUSINESS_ACCOUNTS_URL=$${GOOGLE_BUSINESS_ACCOUNTS_URL:-http://127.0.0.1:8771} \
	GOOGLE_BUSINESS_INFO_URL=$${GOOGLE_BUSINESS_INFO_URL:-http://127.0.0.1:8771} \
	GOOGLE_BUSINESS_REVIEWS_URL=$${GOOGLE_BUSINESS_REVIEWS_URL:-http://127.0.0.1:8771}

# The web server and the task clusters together (the default one, and the
# one that delivers outbound webhooks on its own queue), with the demo's
# stand-ins for the shop's Jobber, calendar and Google reviews. When the web
# server answers, the last lines printed say where to go and the demo logins
# (`manage.py demo_ready`); the clusters log warnings only, so they stay last.
# Ctrl-C stops them all, then the embedded PostgreSQL (the background jobs
# first: they hold connections to it). The stand-ins stop last: a cluster
# finishes the task in hand before it stops, and a task calling a stand-in
# that is gone would wait for its timeout (up to a minute). Their ids are
# kept as they start: /bin/sh (dash) runs `$(jobs -p)` in a subshell, which
# sees no jobs.
# After migrating, the demo loads while the servers start (they need only the
# schema): the static files first, which the web server reads once at start.
run: $(STAMP)
	@pids=""; \
	trap 'trap - INT TERM EXIT; kill $$pids 2>/dev/null; wait $$pids 2>/dev/null; kill $$standins 2>/dev/null; wait; $(PY) -m leadops.embedded_db stop' INT TERM EXIT; \
	$(PY) manage.py migrate --no-input || exit 1; \
	$(PY) manage.py load_demo & demo=$$!; pids="$$pids $$demo"; \
	$(PY) manage.py collectstatic --no-input -v0 || exit 1; \
	export $(DEMO_ENV) Q_LOG_LEVEL=$${Q_LOG_LEVEL:-WARNING}; \
	$(PY) manage.py standins & standins=$$!; \
	$(PY) manage.py qcluster & pids="$$pids $$!"; \
	Q_CLUSTER_NAME=leadops-webhooks $(PY) manage.py qcluster & pids="$$pids $$!"; \
	$(PY) -m gunicorn leadops.wsgi:application -c python:leadops.gunicorn_conf & pids="$$pids $$!"; \
	wait $$demo || exit 1; \
	$(PY) manage.py demo_ready; \
	wait

# Post realistic, signed webhooks for every demo source to the running `make run`,
# and estimates through the API with the demo owner's token (made once, then reused).
DEMO_OWNER ?= olivia
simulate: $(STAMP)
	export $(DEMO_ENV); \
	token="$${SIMULATE_API_TOKEN:-$$($(PY) manage.py drf_create_token $(DEMO_OWNER) | awk '{print $$3}')}"; \
	SIMULATE_API_TOKEN="$$token" $(PY) manage.py simulate --url http://127.0.0.1:8000 --leads $${LEADS:-50}

# The linters (seconds), then the type check (a minute without mypy's cache).
lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

check: lint
	$(VENV)/bin/mypy .

# The suite on pytest-xdist workers, one per core and one more (at most 5),
# each with a test database of its own; PYTEST_WORKERS=0 runs it in this one
# process. The extra worker fills the cores while another waits on the
# processes its test started (the fault drill waits a minute for the sweeps'
# bound, the cluster and multi-host tests for their servers): on 2 cores the
# suite took 634 s with 2 workers, 562 s with 3, 606 s with 4. A file's tests
# stay together on one worker, so its module fixtures (a live server, a
# cluster) start once; files start in the order tests/conftest.py gives them
# (the slowest first), not xdist's (the most tests first).
PYTEST_WORKERS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 1) + 1 )); [ $$n -gt 5 ] && n=5; echo $$n)
pytest: $(DEV_STAMP)
	scripts/ensure-chromium
	scripts/ensure-redis
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The linters first, so a style or layering error fails in seconds; then
# mypy beside the suite instead of before it (its verdict is printed after
# the tests', and either failing fails `make test`). mypy's first run on a
# fresh clone is most of a minute of one core; beside the suite it made a
# fresh clone's `make test` 15 s shorter (docs/operations.md, "Tests").
test: lint
	@echo "$(VENV)/bin/mypy . (beside the suite; its verdict follows the tests')"
	@$(VENV)/bin/mypy . >$(VENV)/mypy.out 2>&1 & types=$$!; \
	$(MAKE) --no-print-directory pytest; suite=$$?; \
	wait $$types; typed=$$?; \
	echo "$(VENV)/bin/mypy ."; cat $(VENV)/mypy.out; \
	exit $$(( suite || typed ))

# Upgrade in place: new requirements, a backup, the migrations, then the
# checks a healthy database passes. Stops at the first failure; the backup
# named above it is the way back (manage.py restore, docs/operations.md).
upgrade: $(STAMP)
	$(PY) manage.py backup
	@$(PY) manage.py migrate || { echo "migrate failed: restore the backup named above (manage.py restore)"; exit 1; }
	@$(PY) manage.py check || { echo "check failed after migrating: the backup named above holds the data from before"; exit 1; }
	@$(PY) manage.py verify_receipts || { echo "verify_receipts failed: the backup named above holds the data from before"; exit 1; }
	@$(PY) manage.py audit_leads || { echo "audit_leads failed: the backup named above holds the data from before"; exit 1; }

stop-db: $(STAMP)
	$(PY) -m leadops.embedded_db stop

# Start the demo over: the embedded PostgreSQL's data goes (an external
# DATABASE_URL is never touched); the next `make run` loads the demo afresh.
reset: stop-db
	rm -rf .data/pg

clean: stop-db
	rm -rf .data $(VENV)
