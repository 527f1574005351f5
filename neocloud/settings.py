"""Settings, read from the environment.

With only ``SECRET_KEY`` set, the embedded default runs: SQLite under ``var/``, Celery tasks
in-process, payments simulated. ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` switch to the
production components. What is unsafe to guess (the secret key, Stripe outside the embedded
default) is refused at start-up, in every process, rather than defaulted: only the demo
(``NEOCLOUD_DEMO=1``, set by ``make demo``) has DEBUG on and a built-in key.
"""

import json
import os
from pathlib import Path
from typing import Any

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from neocloud.core.logs import logging_config

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

# The local demo (`make demo`, `manage.py demo`): DEBUG, a known key and admin/admin. Never a
# consequence of the database choice: a SQLite deployment is not a demo.
DEMO = env_bool("NEOCLOUD_DEMO", default=False)
if DEMO and not EMBEDDED:
    raise ImproperlyConfigured(
        "NEOCLOUD_DEMO runs only on the embedded default: unset DATABASE_URL"
    )
DEBUG = env_bool("DEBUG", default=DEMO)
SECRET_KEY = os.environ.get("SECRET_KEY") or ("insecure-demo-key-never-deploy" if DEMO else "")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set (only the demo, NEOCLOUD_DEMO=1 as `make demo` sets, has one)"
    )
# Project secrets are sealed with these Fernet keys (comma-separated): the first seals, every
# one opens. Rotation: put a new key first, run `manage.py rotate_secrets`, then drop the old.
# Like payments, only the embedded default (the demo's) has a built-in one; production needs
# its own (the tests set theirs).
SECRETS_KEYS = env_list("SECRETS_KEYS", "") or (
    ["bmVvY2xvdWQtZGVtby1vbmx5LW5ldmVyLWRlcGxveSE="] if EMBEDDED else []
)
if not SECRETS_KEYS:
    raise ImproperlyConfigured(
        "SECRETS_KEYS must be set: comma-separated Fernet keys, the first encrypts"
        " (only the embedded default, without DATABASE_URL, has a built-in one)"
    )
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

# --- HTTPS (docs/operations/processes.md's environment sets these; off for plain HTTP) -------
# Behind a TLS-terminating proxy: "HTTP_X_FORWARDED_PROTO,https" trusts its header. Only set it
# when the proxy overwrites that header on every request.
_proxy_ssl_header = env_list("SECURE_PROXY_SSL_HEADER", "")
if _proxy_ssl_header and len(_proxy_ssl_header) != 2:
    raise ImproperlyConfigured(
        "SECURE_PROXY_SSL_HEADER is HEADER,VALUE e.g. HTTP_X_FORWARDED_PROTO,https"
    )
SECURE_PROXY_SSL_HEADER = (
    (_proxy_ssl_header[0], _proxy_ssl_header[1]) if _proxy_ssl_header else None
)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=False)
# Secure outside the embedded default (which serves plain HTTP on loopback); a deployment that
# serves plain HTTP anyway must say so (SESSION_COOKIE_SECURE=false, CSRF_COOKIE_SECURE=false).
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=not EMBEDDED)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", default=not EMBEDDED)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=False)

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
    "storage",
    "scheduler",
    "execution",
    "catalog",
    "orders",
    "metering",
    "billing",
    "gateway",  # web ports through Caddy (issue 32)
    "console",
    "monitoring",
    "django_htmx",
    "axes",
]
AUTH_USER_MODEL = "tenants.User"
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses sign-ins while locked out
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "console:sign-in"
LOGIN_REDIRECT_URL = "console:overview"

# --- sign-in throttle (django-axes): per e-mail and address, then a cool-off ---------------
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("AXES_COOLOFF_HOURS", "0.25"))  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# The caller's address behind the TLS proxy (neocloud/core/addresses.py): how many proxies in
# front append X-Forwarded-For (0: none, the header is ignored). Throttles and lockouts use it.
TRUSTED_PROXY_COUNT = int(os.environ.get("TRUSTED_PROXY_COUNT", "0"))
AXES_CLIENT_IP_CALLABLE = "neocloud.core.addresses.client_address"
# Asked of the console without an account, per hour: password resets per caller address and
# per e-mail address (each sends mail), sign-ups per caller address.
PASSWORD_RESETS_PER_HOUR = int(os.environ.get("PASSWORD_RESETS_PER_HOUR", "5"))
PASSWORD_RESETS_PER_EMAIL_PER_HOUR = int(os.environ.get("PASSWORD_RESETS_PER_EMAIL_PER_HOUR", "3"))
SIGNUPS_PER_HOUR = int(os.environ.get("SIGNUPS_PER_HOUR", "5"))
AXES_USERNAME_FORM_FIELD = "username"  # the sign-in form's (the e-mail), not USERNAME_FIELD
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

# --- e-mail (password resets, invitations): the console backend unless SMTP is configured ---
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "587"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=True)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "NeoCloud <noreply@localhost>")
# Self sign-up on the console's sign-in page, for operators who sell to anyone.
CONSOLE_SIGNUP_ENABLED = env_bool("CONSOLE_SIGNUP_ENABLED", default=False)
# A signed-up user reads only until they follow the link mailed to them: how long the link
# works (3 days), and how many new links a user may have sent an hour (each sends mail).
EMAIL_VERIFICATION_MAX_AGE_S = int(os.environ.get("EMAIL_VERIFICATION_MAX_AGE_S", "259200"))
EMAIL_VERIFICATIONS_PER_HOUR = int(os.environ.get("EMAIL_VERIFICATIONS_PER_HOUR", "3"))

MIDDLEWARE = [
    "monitoring.middleware.RequestMetricsMiddleware",  # first: it times everything below
    "neocloud.middleware.CorrelationMiddleware",  # first: every later line carries the id
    "neocloud.bodies.BodyLimitMiddleware",  # before anything reads or parses a body
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "neocloud.api.middleware.JsonApiErrorsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it answers a locked-out sign-in
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
    # Seconds a connection is kept for its thread's next request. neocloud/asgi.py sets 0:
    # under ASGI each sync request runs on a thread of its own, whose kept connection would
    # outlive it (one leaked session a request until collected).
    DATABASE_CONN_MAX_AGE = int(os.environ.get("DATABASE_CONN_MAX_AGE", "60"))
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=DATABASE_CONN_MAX_AGE)}

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
    "orders-close-ended": {"task": "orders.close_ended", "schedule": 60.0},
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

# --- Metrics (docs/operations/monitoring.md) ----------------------------------------------------
# A scrape of /metrics carries ``Authorization: Bearer $METRICS_TOKEN``; with no token set only
# these peers (REMOTE_ADDR, the direct peer) may scrape. Behind a proxy on the same host every
# client is a loopback peer, so outside the embedded default no peer is allowed unless the
# operator names them: production sets the token.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS", "127.0.0.1,::1" if EMBEDDED else "")
# Organizations' and projects' slugs as labels (neocloud_queue_info): a scraper sees every
# tenant's name, so only when the operator opts in.
METRICS_TENANT_LABELS = env_bool("METRICS_TENANT_LABELS", default=False)

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
# A GPU reporting utilisation below this (percent) is idle from when it was first seen so; a
# running workload all of whose GPUs have been idle longer than GPU_IDLE_FLAG_AFTER_S is
# flagged idle (allocated, not used).
GPU_IDLE_THRESHOLD_PCT = float(os.environ.get("GPU_IDLE_THRESHOLD_PCT", "5"))
GPU_IDLE_FLAG_AFTER_S = float(os.environ.get("GPU_IDLE_FLAG_AFTER_S", "1800"))

# --- Execution (PROVISIONING_DRIVER=agent: node agents run the work) ------------------------

# SSH into runs (issue 32). The jump host users go through to nodes on a private network
# (``user@host[:port]``, shown in each run's ``ssh -J`` command); empty: nodes are reached
# directly at their advertised address.
SSH_JUMP_HOST = os.environ.get("SSH_JUMP_HOST", "")
# A dev environment (kind ``dev``) without its own ``idle_stop_s`` is stopped after this long
# without an SSH session and without GPU use (below GPU_IDLE_THRESHOLD_PCT).
DEV_IDLE_STOP_S = float(os.environ.get("DEV_IDLE_STOP_S", "3600"))
# How long an agent waits after SIGTERM before it kills a run it stops.
AGENT_STOP_GRACE_S = float(os.environ.get("AGENT_STOP_GRACE_S", "10"))
# --- Preemption with notice (issue 32) ---
# A run NeoCloud stops for its own reasons (preempted, its max_runtime_s ending) is told this
# long before it is killed (SIGTERM and .neocloud/notice.json), so it can save a checkpoint;
# never shorter than AGENT_STOP_GRACE_S.
PREEMPTION_NOTICE_S = float(os.environ.get("PREEMPTION_NOTICE_S", "30"))
# Output kept per workload (all its runs); past it, output is counted, not stored.
# Workloads an organization and a project may have waiting (pending or admitted); a submission
# past them is refused (409 too_much_waiting).
WAITING_WORKLOADS_PER_ORGANIZATION = int(
    os.environ.get("WAITING_WORKLOADS_PER_ORGANIZATION", "20000")
)
WAITING_WORKLOADS_PER_PROJECT = int(os.environ.get("WAITING_WORKLOADS_PER_PROJECT", "10000"))
# --- Volumes (issue 32, docs/operations/storage.md) ---
# The storage quota: GB the volumes of one organization may provision at once; a volume
# past it is refused (409 storage_quota_exceeded).
VOLUME_GB_PER_ORGANIZATION = int(os.environ.get("VOLUME_GB_PER_ORGANIZATION", "10000"))
# Where each cluster's shared filesystem (NFS, Lustre...) is mounted on every one of its
# nodes, by cluster slug, e.g. {"eu-west-1": "/mnt/neocloud"}; a cluster without one offers
# no shared volumes.
VOLUME_SHARED_PATHS: dict[str, str] = env_json("VOLUME_SHARED_PATHS", "{}")
# Estimates and dry runs (each runs the engine over a cluster's line) an organization may ask
# for a minute, through the API and the console together; past it 429 throttled.
FORECASTS_PER_MINUTE_PER_ORGANIZATION = int(
    os.environ.get("FORECASTS_PER_MINUTE_PER_ORGANIZATION", "30")
)
# GPUs an organization may hold reserved at any one instant, all its projects and GPU models
# together; a reservation past it is refused (409 too_much_reserved): one tenant may not keep
# the fleet from everyone.
RESERVED_GPUS_PER_ORGANIZATION = int(os.environ.get("RESERVED_GPUS_PER_ORGANIZATION", "64"))
# A reservation cancelled less than this many seconds before its start (or after it) is billed
# for its whole window; cancelled earlier, it costs nothing (docs/user-guide/reservations.md).
RESERVATION_CANCELLATION_NOTICE_S = int(
    os.environ.get("RESERVATION_CANCELLATION_NOTICE_S", str(24 * 3600))
)
# Logs follows (GET workloads/{id}/logs?follow=true) one API key (or user) and one organization
# may have open at once, counted per web process; past them 429 too_many_follows.
LOG_FOLLOWS_PER_KEY = int(os.environ.get("LOG_FOLLOWS_PER_KEY", "8"))
LOG_FOLLOWS_PER_ORGANIZATION = int(os.environ.get("LOG_FOLLOWS_PER_ORGANIZATION", "64"))
# Request bodies past these are refused (413) before they are read (neocloud/bodies.py).
REQUEST_BODY_MAX_BYTES = int(os.environ.get("REQUEST_BODY_MAX_BYTES", str(1 << 20)))
AGENT_REQUEST_BODY_MAX_BYTES = int(os.environ.get("AGENT_REQUEST_BODY_MAX_BYTES", str(4 << 20)))
DATA_UPLOAD_MAX_MEMORY_SIZE = max(REQUEST_BODY_MAX_BYTES, AGENT_REQUEST_BODY_MAX_BYTES)
LOG_MAX_BYTES_PER_WORKLOAD = int(os.environ.get("LOG_MAX_BYTES_PER_WORKLOAD", str(8 << 20)))

# --- Scheduling -----------------------------------------------------------------------------
# A cluster's scheduler holds its lease this long past its last cycle; a standby takes over
# after that. Cycle requests closer together than the debounce make one cycle.
SCHEDULER_LEASE_S = float(os.environ.get("SCHEDULER_LEASE_S", "15"))
SCHEDULER_DEBOUNCE_S = float(os.environ.get("SCHEDULER_DEBOUNCE_S", "0.05"))
# Fair share: past usage weighs half as much every this many seconds (0: only current usage).
SCHEDULER_FAIRSHARE_HALF_LIFE_S = float(os.environ.get("SCHEDULER_FAIRSHARE_HALF_LIFE_S", "3600"))
# Aging counts waiting in whole steps of this many seconds: within a step, fair share orders
# work of one priority (0: continuous aging, and fair share orders only exact ties).
SCHEDULER_AGING_STEP_S = float(os.environ.get("SCHEDULER_AGING_STEP_S", "3600"))
# Start-time estimates of a cluster's waiting work are computed after its cycles, at most once
# per this many seconds (0: after every cycle), off the cycles' path.
SCHEDULER_ESTIMATE_INTERVAL_S = float(os.environ.get("SCHEDULER_ESTIMATE_INTERVAL_S", "30"))
# Beat refreshes every cluster's start-time estimates this often, cycles or none: time alone
# moves them (work ahead that runs longer than expected moves the work behind it out).
SCHEDULER_ESTIMATES_REFRESH_S = float(os.environ.get("SCHEDULER_ESTIMATES_REFRESH_S", "60"))
CELERY_BEAT_SCHEDULE["scheduler-estimates-refresh"] = {
    "task": "scheduler.estimates_refresh",
    "schedule": SCHEDULER_ESTIMATES_REFRESH_S,
}
# The Celery queue of start-time estimates; empty: the default queue, which every worker takes.
SCHEDULER_ESTIMATE_QUEUE = os.environ.get("SCHEDULER_ESTIMATE_QUEUE", "")
# Estimates, dry runs and operators' what-ifs reuse a cluster's latest forecast inputs (its
# waiting and running work, runtimes, usage) while no event concerning the cluster was logged
# since they were read, for at most this many seconds (0: read them for every request).
FORECAST_INPUTS_TTL_S = float(os.environ.get("FORECAST_INPUTS_TTL_S", "10"))
# Forecasts expect the submissions of this window to repeat, once and twice (0: expect none).
SCHEDULER_ESTIMATE_ARRIVALS_WINDOW_S = float(
    os.environ.get("SCHEDULER_ESTIMATE_ARRIVALS_WINDOW_S", "10800")
)
# A run granted but not started after this long is dispatched again (its worker died).
SCHEDULER_RUN_STALE_AFTER_S = float(os.environ.get("SCHEDULER_RUN_STALE_AFTER_S", "30"))
# Beat's tick samples each cluster's fragmentation once per this many seconds (0: never), for
# the operators' chart, and deletes samples older than the retention.
FRAGMENTATION_SAMPLE_S = float(os.environ.get("FRAGMENTATION_SAMPLE_S", "300"))
FRAGMENTATION_RETENTION_DAYS = float(os.environ.get("FRAGMENTATION_RETENTION_DAYS", "30"))

# --- Billing and Stripe ---------------------------------------------------------------------
# Stripe: STRIPE_API_BASE (e.g. localstripe) or STRIPE_MOCK_URL (stripe-mock) point the SDK at a
# local server. Payments are simulated in process only on the embedded default with no Stripe
# setting at all; anywhere else a missing key or webhook secret stops the process here, since
# the simulation would accept any card and mark invoices paid.
STRIPE_API_KEY = os.environ.get("STRIPE_API_KEY", "")
STRIPE_API_BASE = os.environ.get("STRIPE_API_BASE", "")
STRIPE_MOCK_URL = os.environ.get("STRIPE_MOCK_URL", "")
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "")
STRIPE_SIMULATED = EMBEDDED and not (STRIPE_API_KEY or STRIPE_API_BASE or STRIPE_MOCK_URL)
if not STRIPE_SIMULATED:
    _stripe = {"STRIPE_API_KEY": STRIPE_API_KEY, "STRIPE_WEBHOOK_SECRET": STRIPE_WEBHOOK_SECRET}
    _stripe_missing = [name for name, value in _stripe.items() if not value]
    if _stripe_missing:
        raise ImproperlyConfigured(
            f"{', '.join(_stripe_missing)} must be set: payments go through Stripe outside the"
            " embedded default (SQLite, no DATABASE_URL), the only place they are simulated"
        )
STRIPE_MAX_NETWORK_RETRIES = int(os.environ.get("STRIPE_MAX_NETWORK_RETRIES", "2"))
# The console's card form: Stripe.js confirms a SetupIntent in the browser with the publishable
# key (without one, cards are set through the API only). localstripe serves its own Stripe.js
# at <its address>/js.stripe.com/v3/.
STRIPE_PUBLISHABLE_KEY = os.environ.get("STRIPE_PUBLISHABLE_KEY", "")
STRIPE_JS_URL = os.environ.get("STRIPE_JS_URL", "https://js.stripe.com/v3/")
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
        "tenants.throttling.PerKeyThrottle",
        "tenants.throttling.PerIpThrottle",
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
    # Schema naming hints are the schema tests' business, not `check --deploy`'s.
    "ENABLE_DJANGO_DEPLOY_CHECK": False,
}

# --- Logs: structlog, JSON lines on stdout in production, readable lines in the embedded default
LOG_FORMAT = os.environ.get("LOG_FORMAT", "console" if EMBEDDED else "json")
if LOG_FORMAT not in {"json", "console"}:
    raise ImproperlyConfigured("LOG_FORMAT is json or console")
LOGGING = logging_config(
    fmt=LOG_FORMAT,
    level=os.environ.get("LOG_LEVEL", "INFO"),
    loggers={
        # One line per task is a worker's business; in-process (eager) it drowns the demo's output.
        "celery.app.trace": {"level": "INFO" if REDIS_URL else "WARNING"},
        # One line per request (neocloud.middleware): runserver already prints one in the demo.
        "neocloud.requests": {"level": "WARNING" if EMBEDDED else "INFO"},
    },
)

# --- Health (/readyz) -------------------------------------------------------------------------
# Unready when a consumer's oldest unhandled event waits longer than this.
READY_MAX_CONSUMER_LAG_S = float(os.environ.get("READY_MAX_CONSUMER_LAG_S", "60"))

# --- Web gateway (issue 32): web ports through Caddy, authorized by /gateway/auth -------------
# The domain whose subdomains serve web ports: https://<endpoint id>.<GATEWAY_DOMAIN>/ (a
# wildcard DNS record and certificate). Empty: no gateway (no URLs, no routes).
GATEWAY_DOMAIN = os.environ.get("GATEWAY_DOMAIN", "")
# The scheme of those URLs: https in production, http for a gateway on loopback (tests, demo).
GATEWAY_SCHEME = os.environ.get("GATEWAY_SCHEME", "https")
if GATEWAY_SCHEME not in {"http", "https"}:
    raise ImproperlyConfigured("GATEWAY_SCHEME is http or https")
# Caddy's admin API; bind it to loopback (it has no authentication of its own).
GATEWAY_ADMIN_URL = os.environ.get("GATEWAY_ADMIN_URL", "http://127.0.0.1:2019")
# The addresses Caddy's gateway server listens on.
GATEWAY_LISTEN = env_list("GATEWAY_LISTEN", ":443")
# Where Caddy reaches NeoCloud's web processes for forward_auth (host:port).
GATEWAY_AUTH_UPSTREAM = os.environ.get("GATEWAY_AUTH_UPSTREAM", "127.0.0.1:8000")
# The console's own address, where a browser without the endpoint's cookie is sent to sign in.
GATEWAY_CONSOLE_URL = os.environ.get("GATEWAY_CONSOLE_URL", "http://127.0.0.1:8000")
# How long the endpoint's cookie (set after a sign-in or a ?token=) lets a browser in.
GATEWAY_COOKIE_MAX_AGE_S = int(os.environ.get("GATEWAY_COOKIE_MAX_AGE_S", "43200"))
# Beat puts Caddy's routes back to the live endpoints this often (after a crash, a lost call).
GATEWAY_RECONCILE_S = float(os.environ.get("GATEWAY_RECONCILE_S", "30"))
CELERY_BEAT_SCHEDULE["gateway-reconcile"] = {
    "task": "gateway.reconcile",
    "schedule": GATEWAY_RECONCILE_S,
}
