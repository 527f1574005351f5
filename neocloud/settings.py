"""Settings, read from the environment.

With nothing set, the embedded default runs: SQLite under ``var/``, Celery tasks in-process.
``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` switch to the production components.
"""

import json
import os
from pathlib import Path
from typing import Any

import dj_database_url
from celery.schedules import crontab

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("NEOCLOUD_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_json(name: str, default: str) -> Any:
    return json.loads(os.environ.get(name, default))


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not DATABASE_URL

DEBUG = env_bool("DEBUG", default=EMBEDDED)
# The embedded default is a local demo; production must set its own key.
SECRET_KEY = os.environ.get("SECRET_KEY", "insecure-embedded-demo-key-change-me" if DEBUG else "")
if not SECRET_KEY:
    raise RuntimeError("SECRET_KEY must be set when DEBUG is off")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "neocloud",
    "events",
    "tenants",
    "inventory",
    "scheduler",
    "catalog",
    "orders",
    "metering",
    "billing",
]
AUTH_USER_MODEL = "tenants.User"

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "neocloud.api.middleware.JsonApiErrorsMiddleware",
]

ROOT_URLCONF = "neocloud.urls"
WSGI_APPLICATION = "neocloud.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES: dict[str, Any]
if EMBEDDED:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("NEOCLOUD_SQLITE_PATH", str(VAR_DIR / "neocloud.sqlite3")),
            # IMMEDIATE takes SQLite's write lock at BEGIN: appends are serialised the way the
            # PostgreSQL append lock serialises them, instead of failing at commit.
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    }
else:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# --- Cache (throttle counters) -------------------------------------------------------------
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}

# --- Celery -------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "celery")
# Redis has no acks: a message taken by a worker that died comes back after this. Keep it
# above the longest task run + retry countdown, or the message is delivered twice (harmless for
# idempotent steps, but wasted work).
_visibility_timeout = float(os.environ.get("CELERY_VISIBILITY_TIMEOUT_S", "3600"))
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _visibility_timeout,
    # How often workers sweep for such messages (kombu's default is every ~100 s).
    "unacked_restore_interval": max(1, min(10, int(_visibility_timeout // 5))),
    "unacked_restore_throttle": 1,
}
CELERY_BEAT_SCHEDULE = {
    "idempotency-purge": {"task": "neocloud.idempotency_purge", "schedule": 3600.0},
    "provisioning-reconcile": {"task": "inventory.reconcile_provisioning", "schedule": 60.0},
    "heartbeat-check": {"task": "inventory.check_heartbeats", "schedule": 15.0},
    "scheduler-tick": {"task": "scheduler.tick", "schedule": 5.0},
    "metering-budgets-check": {"task": "metering.budgets_check", "schedule": 60.0},
    # Closes the previous month on the 1st (any later day too: closing twice changes nothing).
    "billing-close-period": {
        "task": "billing.close_previous_period",
        "schedule": crontab(minute=30, hour=0, day_of_month="1-3"),
    },
    "billing-collect": {"task": "billing.collect_due", "schedule": 600.0},
}

# --- Event store ----------------------------------------------------------------------------
# Consumers wait on LISTEN/NOTIFY on PostgreSQL; this is the poll fallback (and SQLite's pace).
EVENTS_POLL_INTERVAL_S = float(os.environ.get("EVENTS_POLL_INTERVAL_S", "1.0"))

# --- Provisioning ---------------------------------------------------------------------------
PROVISIONING_DRIVER = os.environ.get("PROVISIONING_DRIVER", "simulated")
PROVISIONING_MAX_ATTEMPTS = int(os.environ.get("PROVISIONING_MAX_ATTEMPTS", "5"))  # per step
PROVISIONING_RETRY_BASE_S = float(os.environ.get("PROVISIONING_RETRY_BASE_S", "1.0"))  # 1, 2, 4 s
PROVISIONING_STEP_TIMEOUT_S = int(os.environ.get("PROVISIONING_STEP_TIMEOUT_S", "60"))
PROVISIONING_STALE_AFTER_S = float(os.environ.get("PROVISIONING_STALE_AFTER_S", "300"))
# The simulated driver: per-step delay (seconds, or {"default": s, "<step>": s}), injected
# faults ({"<step>": {"fail"|"hang"|"crash": probability, "first_attempts": n}}), seeded.
SIMULATED_STEP_DELAY_S = env_json("SIMULATED_STEP_DELAY_S", "0.05")
SIMULATED_FAULTS = env_json("SIMULATED_FAULTS", "{}")
SIMULATED_SEED = int(os.environ.get("SIMULATED_SEED", "0"))
SIMULATED_HANG_S = float(os.environ.get("SIMULATED_HANG_S", "3600"))
# A ready, cordoned or draining node not heard from for this long is failed.
HEARTBEAT_TIMEOUT_S = float(os.environ.get("HEARTBEAT_TIMEOUT_S", "90"))

# --- Scheduling -----------------------------------------------------------------------------
# A cluster's scheduler holds its lease this long past its last cycle; a standby takes over
# after that. Cycle requests closer together than the debounce make one cycle.
SCHEDULER_LEASE_S = float(os.environ.get("SCHEDULER_LEASE_S", "15"))
SCHEDULER_DEBOUNCE_S = float(os.environ.get("SCHEDULER_DEBOUNCE_S", "0.05"))
# A run granted but not started after this long is dispatched again (its worker died).
SCHEDULER_RUN_STALE_AFTER_S = float(os.environ.get("SCHEDULER_RUN_STALE_AFTER_S", "30"))

# --- Billing and Stripe ---------------------------------------------------------------------
# Stripe: STRIPE_API_BASE (e.g. localstripe) or STRIPE_MOCK_URL (stripe-mock) point the SDK at a
# local server; with neither and no STRIPE_API_KEY, payments are simulated in process.
STRIPE_API_KEY = os.environ.get("STRIPE_API_KEY", "")
STRIPE_API_BASE = os.environ.get("STRIPE_API_BASE", "")
STRIPE_MOCK_URL = os.environ.get("STRIPE_MOCK_URL", "")
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "")
STRIPE_MAX_NETWORK_RETRIES = int(os.environ.get("STRIPE_MAX_NETWORK_RETRIES", "2"))
# Organizations without a billing profile are billed in this country and currency.
BILLING_DEFAULT_COUNTRY = os.environ.get("BILLING_DEFAULT_COUNTRY", "US")
BILLING_DEFAULT_CURRENCY = os.environ.get("BILLING_DEFAULT_CURRENCY", "USD")
# Dunning: retry a failed payment after 1 day, then 2 days…; after this many failures stop
# and refuse new orders until the invoice is paid.
BILLING_DUNNING_MAX_FAILURES = int(os.environ.get("BILLING_DUNNING_MAX_FAILURES", "3"))
BILLING_DUNNING_RETRY_BASE_S = float(os.environ.get("BILLING_DUNNING_RETRY_BASE_S", "86400"))
# An attempt still pending this long (a crash, Stripe unreachable) is resumed with its key.
BILLING_PENDING_RETRY_S = float(os.environ.get("BILLING_PENDING_RETRY_S", "600"))

# --- REST API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "neocloud.api.schema.AutoSchema",
    "EXCEPTION_HANDLER": "neocloud.api.errors.exception_handler",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # First, so that a 401 carries `WWW-Authenticate: Bearer`.
        "tenants.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": [
        "neocloud.api.throttling.PerKeyThrottle",
        "neocloud.api.throttling.PerIpThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "key": os.environ.get("THROTTLE_RATE_PER_KEY", "1200/min"),
        "anon": os.environ.get("THROTTLE_RATE_ANONYMOUS", "60/min"),
    },
    # JSON only: types are strict (neocloud.api.fields), which a form cannot carry.
    "DEFAULT_PARSER_CLASSES": ["neocloud.api.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "NeoCloud API",
    "DESCRIPTION": "Multi-tenant GPU cloud: tenancy, catalog, orders, workloads, usage, billing.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # One line per task is a worker's business; in-process (eager) it drowns the demo's output.
    "loggers": {"celery.app.trace": {"level": "INFO" if REDIS_URL else "WARNING"}},
}
