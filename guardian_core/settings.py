"""Guardian's one settings module, driven by the environment variables in .env.example."""

from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from kombu import Queue

from guardian_core.env import (
    broker_from_url,
    database_from_url,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_json_onnx_models,
    env_json_prices,
    env_json_priors,
    env_list,
    env_secret_key,
    env_sql_role,
    env_str,
    load_project_dotenv,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# A .env in the project root fills in what the environment leaves unset, for every entry point
# (manage.py, gunicorn, the Celery worker and beat): they all load this module first.
load_project_dotenv(BASE_DIR)
VAR_DIR = Path(env_str("GUARDIAN_VAR_DIR") or BASE_DIR / "var").resolve()
# Runtime files (SQLite, embedded broker, beat schedule, collected static) all live here.
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", True)

# Required and strong with DEBUG off (env_secret_key says what strong means).
SECRET_KEY = env_secret_key(
    "SECRET_KEY",
    debug=DEBUG,
    development_key="django-insecure-development-only-never-use-this-key-in-production",
)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "axes",
    # The floor, then the rooms: the auditors' (runs) and reviewers' (escalations), the admins'
    # (policies), and make demo's setup above them all (docs/ARCHITECTURE.md).
    "guardian_core",
    "runs",
    "escalations",
    "policies",
    "demo",
    # Issue 27: the MCP gateway (manage.py mcp_gateway), Guardian between an MCP client and
    # its upstream MCP servers.
    "mcp_gateway",
]

MIDDLEWARE = [
    # First: the request id (X-Request-ID) and the user on every line the request logs.
    "guardian_core.logs.RequestLogContextMiddleware",
    # Metrics (issue 26): next, so a request's count and time include every other middleware.
    "guardian_core.middleware.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The Content-Security-Policy header (SECURE_CSP below) on every page Django renders.
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The browser's language (its cookie, then Accept-Language), for pages and API messages.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A signed-in person's own language and time zone win over the browser's.
    "guardian_core.preferences.PersonPreferencesMiddleware",
    # Every page needs a login unless it is marked @login_not_required: the safe default.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A view's Http404 renders templates/404.html in DEBUG too, never the debug page.
    "guardian_core.middleware.FriendlyNotFoundMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "guardian_core.urls"
WSGI_APPLICATION = "guardian_core.wsgi.application"

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
                "guardian_core.roles.navigation",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'guardian.sqlite3'}"
DATABASES = {
    "default": database_from_url(DATABASE_URL, sqlite_test_name=VAR_DIR / "test.sqlite3"),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# PostgreSQL with two roles: the role the app runs as (web, worker, beat; DATABASE_URL of their
# processes), which `migrate`, run as the tables' owner, grants what the app needs and no more
# (runs/db_roles.py). Empty: one role does both (development, the test suite).
GUARDIAN_DB_APP_ROLE = env_sql_role("GUARDIAN_DB_APP_ROLE")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT wrong passwords in a row for one
# username from one address, that pair is locked out for LOGIN_COOLOFF_MINUTES, on the login
# page and the admin's alike. Per pair, so an attacker cannot lock a user out from elsewhere
# and a colleague behind the same address still signs in. The axes backend must come first.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# A typed username cut to the column axes keeps it in: an overlong one is a wrong username,
# never a failed insert.
AXES_USERNAME_CALLABLE = "guardian_core.throttle.throttled_username"
# Quiet at startup (commands print one line on failure) and per sign-in; lockouts still warn.
AXES_VERBOSE = False
# The address throttling counts by: REMOTE_ADDR, or behind BEHIND_TLS_PROXY the one the
# outermost of GUARDIAN_TRUSTED_PROXY_COUNT proxies saw (guardian_core/client_address.py).
AXES_CLIENT_IP_CALLABLE = "guardian_core.client_address.client_address"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Issue 28: English and French. A person's language is their choice (PersonPreferences), else
# the browser's Accept-Language, else English; the API's field names and codes stay English.
LANGUAGES = [("en", "English"), ("fr", "Français")]
# The server's language: pages for a person who chose none and whose browser asks for none of
# LANGUAGES, notices to a shared address or the webhook, and management commands.
LANGUAGE_CODE = env_choice("GUARDIAN_LANGUAGE", "en", [code for code, _name in LANGUAGES])
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT") or VAR_DIR / "static")
# WhiteNoise serves collectstatic's output in production and the finders in DEBUG; it warns on
# every request while the folder is missing, so it always exists.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# Security. Cookies are Secure outside DEBUG; a deployment served over plain HTTP on a private
# network can turn that off explicitly with SECURE_COOKIES=false.
SECURE_COOKIES = env_bool("SECURE_COOKIES", not DEBUG)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 8 * 3600, minimum=60)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
BEHIND_TLS_PROXY = env_bool("BEHIND_TLS_PROXY", False)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# How many proxies in front append to X-Forwarded-For (1: one nginx or load balancer). Only
# behind BEHIND_TLS_PROXY: without a proxy that header is whatever a client sent.
GUARDIAN_TRUSTED_PROXY_COUNT = env_int(
    "GUARDIAN_TRUSTED_PROXY_COUNT", 1 if BEHIND_TLS_PROXY else 0, minimum=0
)
if GUARDIAN_TRUSTED_PROXY_COUNT and not BEHIND_TLS_PROXY:
    raise ImproperlyConfigured(
        "GUARDIAN_TRUSTED_PROXY_COUNT is set but BEHIND_TLS_PROXY is not: without a proxy in "
        "front, X-Forwarded-For is whatever a client sends; set BEHIND_TLS_PROXY=true or "
        "leave the count unset"
    )
# HSTS: sent only on responses served over TLS (SecurityMiddleware checks), so a plain-HTTP
# demo or a private-network deployment is not locked to HTTPS. Off in DEBUG: a browser that saw
# it once for localhost would refuse the plain-HTTP dev server on every port for a year.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
# Content-Security-Policy: scripts, styles, images and requests from this site only, and no
# inline script or style at all (no 'unsafe-inline', no 'unsafe-eval', no nonces). A goal or a
# tool output that slipped past escaping still could not run; htmx is configured for it in
# templates/base.html (no eval, no injected <style>, no <script> in swapped fragments).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "object-src": [CSP.NONE],
}

# Celery: every setting below is read by guardian_core/celery.py with the CELERY_ prefix.
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS, _default_result_backend = broker_from_url(
    env_str("CELERY_BROKER_URL") or "filesystem://", var_dir=VAR_DIR
)
if CELERY_BROKER_URL.startswith("filesystem:"):
    # The embedded default's queue files appear only once written whole: kombu's own transport
    # lets a worker read a message before it is written and stop (filesystem_broker.py).
    CELERY_BROKER_TRANSPORT = "guardian_core.filesystem_broker:Transport"
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND") or _default_result_backend
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_TIMEOUT = 5
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE = {
    "sweep-stalled-runs": {"task": "runs.sweep_stalled_runs", "schedule": 30.0},
    # Deadline warnings for unclaimed escalations, and arrival notices that never left.
    "notify-reviewers": {"task": "escalations.notify_due", "schedule": 60.0},
    # Shadow trials decide the turns logged since their last pass (policies/shadow.py).
    "shadow-trials": {"task": "runs.shadow_trials_catch_up", "schedule": 10.0},
    # The monitoring page's days, folded from the decision log (policies/monitoring.py).
    "monitoring-rollup": {"task": "guardian_core.monitoring_catch_up", "schedule": 60.0},
    # Guardian model jobs whose worker died, or that no worker picked up (policies/learning.py).
    "sweep-guardian-model-jobs": {"task": "policies.sweep_guardian_model_jobs", "schedule": 60.0},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Retention (issue 26, item 4; runs/retention.py): days each kind is kept, 0 = forever (the
# default). Finished runs past GUARDIAN_RETAIN_RUNS_DAYS are written to a signed archive in
# GUARDIAN_ARCHIVE_DIR (checked offline by `manage.py verify_log --file`) and purged; labelled
# examples no run's seal covers and no guardian model version learnt from, and notification
# deliveries of escalations no longer open, are deleted. A beat pass every hour, on the
# maintenance queue.
GUARDIAN_RETAIN_RUNS_DAYS = env_int("GUARDIAN_RETAIN_RUNS_DAYS", 0, minimum=0)
GUARDIAN_RETAIN_EXAMPLES_DAYS = env_int("GUARDIAN_RETAIN_EXAMPLES_DAYS", 0, minimum=0)
GUARDIAN_RETAIN_NOTIFICATIONS_DAYS = env_int("GUARDIAN_RETAIN_NOTIFICATIONS_DAYS", 0, minimum=0)
GUARDIAN_ARCHIVE_DIR = Path(env_str("GUARDIAN_ARCHIVE_DIR") or VAR_DIR / "archive").resolve()
CELERY_BEAT_SCHEDULE["retention"] = {"task": "runs.apply_retention", "schedule": 3600.0}

# Celery queues (issue 26, scale-out): each kind of work on a queue of its own, so a busy kind
# cannot starve another and each can get workers of its own (`celery worker -Q turns`).
# CELERY_TASK_QUEUES declares them all: a worker started without -Q consumes every one (the
# demo, the tests' workers and compose's `worker`). A task not routed below (a beat-only task
# added later, the worker ping) goes to the default queue, maintenance.
GUARDIAN_CELERY_QUEUES = ("turns", "guardian", "notifications", "maintenance")
CELERY_TASK_DEFAULT_QUEUE = "maintenance"
CELERY_TASK_QUEUES = tuple(Queue(name, routing_key=name) for name in GUARDIAN_CELERY_QUEUES)
CELERY_TASK_ROUTES = {
    # Run slices: the tasks that advance runs.
    "runs.advance_run": {"queue": "turns"},
    # Guardian work that blocks a worker for long: guardian model jobs (fits, evaluations).
    "guardian_core.run_guardian_model_job": {"queue": "guardian"},
    # Notices to reviewers, and external runs' verdicts POSTed to their webhooks.
    "escalations.notify": {"queue": "notifications"},
    "runs.deliver_verdict": {"queue": "notifications"},
    # Beat's periodic passes.
    "runs.sweep_stalled_runs": {"queue": "maintenance"},
    "policies.sweep_guardian_model_jobs": {"queue": "maintenance"},
    "escalations.notify_due": {"queue": "maintenance"},
    "guardian_core.monitoring_catch_up": {"queue": "maintenance"},
    "runs.shadow_trials_catch_up": {"queue": "maintenance"},
    "runs.demo_traffic_tick": {"queue": "maintenance"},
    "runs.apply_retention": {"queue": "maintenance"},
}

# Tools runs may use: dotted paths to guardian_core.engine.tools.Tool objects, and webhook
# tools (name -> url, description, schema, risk_class, timeout_seconds, headers).
GUARDIAN_TOOLS = [
    "runs.demo_tools.READ_ORDER",
    "runs.demo_tools.LOOKUP_POLICY",
    "runs.demo_tools.SEARCH_DOCS",
    "runs.demo_tools.READ_TRACKING",
    "runs.demo_tools.LIST_PROMOTIONS",
    "runs.demo_tools.ISSUE_REFUND",
    "runs.demo_tools.FLAG_ORDER",
    "runs.demo_tools.SEND_EMAIL",
    "runs.demo_tools.SLOW_LOOKUP",
    "runs.demo_tools.CHECK_CODE",
]
GUARDIAN_WEBHOOK_TOOLS: dict = {}

# Guardians and actors. Every guardian answers under one deadline per turn; a late answer is
# malformed and escalates.
GUARDIAN_DEADLINE_SECONDS = env_float("GUARDIAN_DEADLINE_SECONDS", 2.0, minimum=0.05)
GUARDIAN_HTTP_URL = env_str("GUARDIAN_HTTP_URL")
GUARDIAN_HTTP_API_KEY = env_str("GUARDIAN_HTTP_API_KEY")
GUARDIAN_HTTP_MODEL_VERSION = env_str("GUARDIAN_HTTP_MODEL_VERSION")
# Bring your own model (guardian "onnx"): the conditions answered by local ONNX text
# classifiers, {"condition": "/absolute/model/directory"}; the local guardian answers the rest.
# Each directory holds model.onnx, tokenizer.json and guardian.json (docs/adapters.md).
GUARDIAN_ONNX_MODELS = env_json_onnx_models("GUARDIAN_ONNX_MODELS")
# Threads one model inference may use (onnxruntime's intra-op threads).
GUARDIAN_ONNX_THREADS = env_int("GUARDIAN_ONNX_THREADS", 1, minimum=1)
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or "http://127.0.0.1:11434/v1"
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_GUARDIAN_MODEL = env_str("OPENAI_GUARDIAN_MODEL")
OPENAI_ACTOR_MODEL = env_str("OPENAI_ACTOR_MODEL")
# The coder/reviewer loop's two chat models (run.config coder_model / reviewer_model override
# them per run): a different model reviews better than the coder reviewing itself.
OPENAI_CODER_MODEL = env_str("OPENAI_CODER_MODEL")
OPENAI_REVIEWER_MODEL = env_str("OPENAI_REVIEWER_MODEL")
# Prices per model, so that the actor's and the guardian's calls count against max_cost:
# {"model-name": {"input_per_million": 0.15, "output_per_million": 0.6}}. A model with no
# price costs nothing, but its tokens still count against max_tokens.
GUARDIAN_MODEL_PRICES = env_json_prices("GUARDIAN_MODEL_PRICES")
# Model names a policy version's second-tier judge may name (besides the priced and the
# configured OPENAI_*_MODEL ones): a judge on a name nothing serves is refused when written.
GUARDIAN_JUDGE_MODELS = env_list("GUARDIAN_JUDGE_MODELS", [])
# A worker holds a run this long while it advances one turn; after that the sweeper may give
# the run to another worker. Longer than the slowest turn, shorter than a person's patience.
GUARDIAN_TURN_LEASE_SECONDS = env_int("GUARDIAN_TURN_LEASE_SECONDS", 300, minimum=5)
# The regression gates on activating a policy version (policies/policy_gate.py) or a
# guardian model version (policies/guardian_gate.py): refuse when the expected cost (or a
# condition's ECE) worsens by more than this share; replay at most this many labelled examples
# (near-misses first for a policy version, the newest for a guardian model version).
GUARDIAN_GATE_COST_TOLERANCE = env_float("GUARDIAN_GATE_COST_TOLERANCE", 0.05, minimum=0.0)
GUARDIAN_GATE_MAX_EXAMPLES = env_int("GUARDIAN_GATE_MAX_EXAMPLES", 5000, minimum=1)
# The traffic's share of positives per condition, {"integrity": 0.05}, when an admin knows it
# better than the audit sample or the traffic's scores tell (policies/priors.py): calibration
# maps answer at this prior, and the gate reads its figures at it.
GUARDIAN_LIVE_PRIORS = env_json_priors("GUARDIAN_LIVE_PRIORS")
# The guardian model gate compares the two versions paired, over this many bootstrap
# resamples of the examples (a fixed seed: the same examples give the same report).
GUARDIAN_GATE_REPLICATES = env_int("GUARDIAN_GATE_REPLICATES", 1000, minimum=100)
# ... and never lets through a version that fires on more than this share of the negatives of
# a condition whose firing asks a person (integrity, risk) at the live prior, whatever the
# costs say: each false alarm is a review. Above the shipped local guardian's 17 % on real
# sources, far below the 83 % of a map fitted at the labelled share (issue 25).
GUARDIAN_GATE_MAX_FLAGGED_BENIGN = env_float("GUARDIAN_GATE_MAX_FLAGGED_BENIGN", 0.20, minimum=0.0)
# /policies/monitoring/ warns when the last day's escalations per hour exceed this, and the
# guardian model gate refuses a version that would send more (at the last week's traffic).
GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = env_float(
    "GUARDIAN_REVIEWER_CAPACITY_PER_HOUR", 10.0, minimum=0.0
)
# The monitoring page's suggested t* and δ price one review at this share of the cheaper of a
# condition's two error costs, min(C_stop, C_cont) (policies/monitoring.review_cost).
GUARDIAN_REVIEW_COST_SHARE = env_float("GUARDIAN_REVIEW_COST_SHARE", 0.1, minimum=0.0)
# A shadow trial decides a turn once its decision is this old: one still committing may hold a
# lower id than one already visible, and the trial reads in id order (policies/shadow.py).
GUARDIAN_SHADOW_SETTLE_SECONDS = env_float("GUARDIAN_SHADOW_SETTLE_SECONDS", 15.0, minimum=0.0)
# External runs (runs/external.py): a step whose calls were handed to the caller and whose
# results never came back is escalated as ambiguous after this many seconds; a verdict sent
# to a run's webhook waits this long for its answer (and is retried with backoff).
GUARDIAN_EXTERNAL_RESULTS_SECONDS = env_float(
    "GUARDIAN_EXTERNAL_RESULTS_SECONDS", 900.0, minimum=1.0
)
GUARDIAN_WEBHOOK_TIMEOUT_SECONDS = env_float("GUARDIAN_WEBHOOK_TIMEOUT_SECONDS", 5.0, minimum=0.1)
# The longest a long poll on an escalation holds its request (callers ask for up to 30 s).
GUARDIAN_EXTERNAL_MAX_WAIT_SECONDS = env_float(
    "GUARDIAN_EXTERNAL_MAX_WAIT_SECONDS", 30.0, minimum=0.0
)
# The wait server (runs/wait_server.py, `manage.py wait_server`): callers waiting for a
# person's verdict are held there on one event loop, no thread each. GUARDIAN_WAIT_URL is its
# address as callers reach it (http://wait.example.com:8001); the step answers' `wait_url`
# points there. Empty (make demo): callers wait on this server, a thread each while they wait.
GUARDIAN_WAIT_URL = env_str("GUARDIAN_WAIT_URL").rstrip("/")
if GUARDIAN_WAIT_URL and urlsplit(GUARDIAN_WAIT_URL).scheme not in ("http", "https"):
    raise ImproperlyConfigured(
        f"GUARDIAN_WAIT_URL={GUARDIAN_WAIT_URL!r} must be an http:// or https:// address."
    )
# Where a committed verdict is announced to the wait server (Redis pub/sub): the broker's Redis
# unless named; "off", or a broker that is not Redis: no announcement, the wait server finds
# verdicts by its poll alone.
_wait_redis = env_str("GUARDIAN_WAIT_REDIS_URL") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
)
GUARDIAN_WAIT_REDIS_URL = "" if _wait_redis.lower() == "off" else _wait_redis
if GUARDIAN_WAIT_REDIS_URL and not GUARDIAN_WAIT_REDIS_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured(
        "GUARDIAN_WAIT_REDIS_URL must be a redis:// or rediss:// address, or off."
    )
# The wait server's poll of every escalation it holds a caller for, in one statement: a lost
# announcement delays an answer by at most this long.
GUARDIAN_WAIT_FALLBACK_SECONDS = env_float("GUARDIAN_WAIT_FALLBACK_SECONDS", 5.0, minimum=0.1)
# The wait server's database threads (each keeps one connection open): every read and the
# answer run on them; waiting runs on none.
GUARDIAN_WAIT_DB_THREADS = env_int("GUARDIAN_WAIT_DB_THREADS", 4, minimum=1)
# The monitoring rollup folds a decision once it is this many seconds old, for the same reason.
GUARDIAN_MONITORING_SETTLE_SECONDS = env_float(
    "GUARDIAN_MONITORING_SETTLE_SECONDS", 15.0, minimum=0.0
)
# Demo traffic (runs/demo_traffic.py): every this many seconds beat starts one more demo
# scenario run, judged by the local guardian, up to GUARDIAN_DEMO_TRAFFIC_MAX_RUNS of them,
# so that monitoring and shadow trials see live turns. 0, the default, starts none; `make demo`
# sets 60.
GUARDIAN_DEMO_TRAFFIC_SECONDS = env_float("GUARDIAN_DEMO_TRAFFIC_SECONDS", 0.0, minimum=0.0)
GUARDIAN_DEMO_TRAFFIC_MAX_RUNS = env_int("GUARDIAN_DEMO_TRAFFIC_MAX_RUNS", 120, minimum=0)
if GUARDIAN_DEMO_TRAFFIC_SECONDS > 0:
    CELERY_BEAT_SCHEDULE["demo-traffic"] = {
        "task": "runs.demo_traffic_tick",
        "schedule": GUARDIAN_DEMO_TRAFFIC_SECONDS,
    }
# Runs marked running with no worker on them for this long are enqueued again.
GUARDIAN_STALLED_AFTER_SECONDS = env_int("GUARDIAN_STALLED_AFTER_SECONDS", 60, minimum=1)
# Guardian model jobs (the guardian models page): a worker running one records a sign of life
# this often; one silent for four of these died (killed, out of memory, its machine
# restarted), and the sweeper fails it (policies/learning.py guardian_model_jobs_sweep). A job
# still running, or still queued with no worker to pick it up, after
# GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES is failed too.
GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS = env_int(
    "GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS", 30, minimum=1
)
GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES = env_int("GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES", 60, minimum=1)
# After this many consecutive failures to advance, a run is parked for a person.
GUARDIAN_MAX_ADVANCE_FAILURES = env_int("GUARDIAN_MAX_ADVANCE_FAILURES", 3, minimum=1)
GUARDIAN_ESCALATION_HOURS = env_int("GUARDIAN_ESCALATION_HOURS", 24, minimum=1)
# Audit sampling (escalations/audit_samples.py): this share of the turns the policy did not
# escalate goes to the reviewers' queue as a low-priority item that holds nothing, asking about
# one condition the guardian answered; the labels are the one unbiased sample of the traffic.
# 0 sends none, 1 every such turn.
GUARDIAN_AUDIT_SAMPLE_SHARE = env_float(
    "GUARDIAN_AUDIT_SAMPLE_SHARE", 0.02, minimum=0.0, maximum=1.0
)
# The reviewers' queue. A claim lapses after GUARDIAN_CLAIM_MINUTES without a verdict; the
# holder may extend an escalation's deadline once, by GUARDIAN_DEADLINE_EXTENSION_MINUTES.
GUARDIAN_CLAIM_MINUTES = env_int("GUARDIAN_CLAIM_MINUTES", 15, minimum=1)
GUARDIAN_DEADLINE_EXTENSION_MINUTES = env_int("GUARDIAN_DEADLINE_EXTENSION_MINUTES", 60, minimum=1)
# An approval runs its exact action once, and only within this long of being given.
GUARDIAN_APPROVAL_MINUTES = env_int("GUARDIAN_APPROVAL_MINUTES", 60, minimum=1)
# Notifications when an escalation arrives, and when one nears its deadline unclaimed
# (GUARDIAN_DEADLINE_WARNING_MINUTES before it): email to these addresses and/or a
# Slack-compatible JSON POST to the webhook. Nothing is sent when neither is set.
GUARDIAN_NOTIFY_EMAILS = env_list("GUARDIAN_NOTIFY_EMAILS", [])
GUARDIAN_NOTIFY_WEBHOOK_URL = env_str("GUARDIAN_NOTIFY_WEBHOOK_URL")
GUARDIAN_DEADLINE_WARNING_MINUTES = env_int("GUARDIAN_DEADLINE_WARNING_MINUTES", 60, minimum=1)
# The absolute address of this installation, for the links in notifications; by default the
# demo's (make demo exports PORT).
GUARDIAN_BASE_URL = (
    env_str("GUARDIAN_BASE_URL") or f"http://127.0.0.1:{env_str('PORT') or 8000}"
).rstrip("/")
_base = urlsplit(GUARDIAN_BASE_URL)
if _base.scheme not in ("http", "https") or not _base.netloc:
    raise ImproperlyConfigured(
        f"GUARDIAN_BASE_URL={GUARDIAN_BASE_URL!r} is not an http(s) address like "
        "https://guardian.example.org."
    )
# Email, as Django 6.1's MAILERS: the console backend (mail printed to the log) with DEBUG, as
# in make demo; SMTP otherwise. EMAIL_BACKEND names any other Django backend; the EMAIL_HOST...
# variables configure the SMTP one only (another backend refuses options it does not know).
_MAIL_BACKEND = env_str("EMAIL_BACKEND") or (
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend"
)
MAILERS = {"default": {"BACKEND": _MAIL_BACKEND}}
if _MAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend":
    MAILERS["default"]["OPTIONS"] = {
        "host": env_str("EMAIL_HOST", "localhost"),
        "port": env_int("EMAIL_PORT", 25, minimum=1),
        "username": env_str("EMAIL_HOST_USER"),
        "password": env_str("EMAIL_HOST_PASSWORD"),
        "use_tls": env_bool("EMAIL_USE_TLS", False),
        "timeout": env_int("EMAIL_TIMEOUT", 10, minimum=1),
    }
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "guardian@localhost")
# A worker advances a run turn after turn for up to this long before it enqueues the next
# turn and moves on to other runs (0: one turn per task). Each turn commits on its own.
GUARDIAN_TURN_SLICE_SECONDS = env_float("GUARDIAN_TURN_SLICE_SECONDS", 0.5, minimum=0.0)
# The scripted actor and guardian play whatever script a caller hands them, the guardian's
# answers and a "success" included: a demo and test tool, so off unless DEBUG (make demo).
GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = env_bool("GUARDIAN_ALLOW_SCRIPTED_ADAPTERS", DEBUG)

REST_FRAMEWORK = {
    # Machines send `Authorization: Bearer <token>` (guardian_core.ApiToken): a request that
    # names a token is that token's, whatever cookie comes with it; the browser's session
    # otherwise. No credentials, or bad ones, is a 403 (the token class names no
    # WWW-Authenticate challenge, so DRF does not turn it into a 401).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "guardian_core.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # \u-escaped output: an error that echoes a lone surrogate back stays valid to encode.
    "UNICODE_JSON": False,
    # JSON only, and a document nested too deeply is a 400 naming its field, not a 500.
    "DEFAULT_PARSER_CLASSES": ["guardian_core.parsers.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "guardian_core.api_schema.GuardianAutoSchema",
    "EXCEPTION_HANDLER": "guardian_core.api.exception_handler",
    # A bounded page size: no caller can dump every row in one request.
    "DEFAULT_PAGINATION_CLASS": "guardian_core.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Guardian API",
    "DESCRIPTION": "Runs, escalations and policy versions of a Guardian installation.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # /api/docs/ serves Swagger UI from the sidecar package's static files: no CDN, and its
    # init script as a file of its own (SpectacularSwaggerSplitView), under script-src 'self'.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.models.RunStatus",
        "EscalationStatusEnum": "escalations.models.EscalationStatus",
        "ToolCallStatusEnum": "runs.models.ToolCallStatus",
        "DecisionOutcomeEnum": "runs.models.DecisionOutcome",
    },
}

# Structured logs (issue 26): GUARDIAN_LOG_FORMAT=json writes one JSON object a line, with the
# request id, user, run id, turn, escalation id and model version where known
# (guardian_core/logs.py); "plain", the default, keeps the human-readable lines of make demo.
GUARDIAN_LOG_FORMAT = env_str("GUARDIAN_LOG_FORMAT", "plain").lower()
if GUARDIAN_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(
        f"GUARDIAN_LOG_FORMAT={GUARDIAN_LOG_FORMAT!r}: use 'plain' or 'json'."
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "guardian_core.logs.json_formatter"},
    },
    "filters": {
        "forbidden_without_traceback": {"()": "guardian_core.log_filters.ForbiddenWithoutTraceback"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": GUARDIAN_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "axes": {"level": "WARNING"},
        # Django's default config gives "django" a console handler of its own (in DEBUG) while
        # its records also reach the root's: every warning was written twice. Root's only.
        "django": {"handlers": [], "level": "INFO"},
        # A 403 is one warning line, without the traceback of the PermissionDenied behind it.
        "django.request": {"filters": ["forbidden_without_traceback"]},
        # One line per request (guardian_core.logs), in the JSON format only: the plain format
        # keeps make demo's lines as they were (runserver logs its own).
        "guardian.request": {"level": "INFO" if GUARDIAN_LOG_FORMAT == "json" else "WARNING"},
    },
}

# The decision log's key (runs/chain.py): every decision and every run is sealed with
# HMAC-SHA256 under it, so someone who can rewrite the database cannot forge the log. Keep it
# out of the database and its backups: GUARDIAN_LOG_KEY, or a file GUARDIAN_LOG_KEY_FILE
# (e.g. a mounted secret); at least 32 characters outside DEBUG. Unset, a key is derived from
# SECRET_KEY under a label of its own. After a rotation, list the retired keys in
# GUARDIAN_LOG_OLD_KEYS (comma-separated): they verify what they sealed, never seal again.
GUARDIAN_LOG_KEY = env_str("GUARDIAN_LOG_KEY")
_log_key_file = env_str("GUARDIAN_LOG_KEY_FILE")
if _log_key_file:
    if GUARDIAN_LOG_KEY:
        raise ImproperlyConfigured("Set GUARDIAN_LOG_KEY or GUARDIAN_LOG_KEY_FILE, not both.")
    try:
        GUARDIAN_LOG_KEY = Path(_log_key_file).read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"GUARDIAN_LOG_KEY_FILE={_log_key_file!r} cannot be read: {exc}"
        ) from exc
    if not GUARDIAN_LOG_KEY:
        raise ImproperlyConfigured(f"GUARDIAN_LOG_KEY_FILE={_log_key_file!r} is empty.")
GUARDIAN_LOG_OLD_KEYS = env_list("GUARDIAN_LOG_OLD_KEYS", [])

# ---- Metrics (issue 26, docs/OPERATIONS.md, Metrics) ----
# /metrics in the Prometheus text format: off (a 404) unless GUARDIAN_METRICS_ENABLED, and then
# only for a scraper that sends `Authorization: Bearer GUARDIAN_METRICS_TOKEN` or comes from an
# address in GUARDIAN_METRICS_ALLOW (addresses or networks, comma-separated); 403 otherwise.
GUARDIAN_METRICS_ENABLED = env_bool("GUARDIAN_METRICS_ENABLED", False)
GUARDIAN_METRICS_TOKEN = env_str("GUARDIAN_METRICS_TOKEN")
GUARDIAN_METRICS_ALLOW = env_list("GUARDIAN_METRICS_ALLOW", [])
# A worker serves its own figures on this port (0: none); and writes its heartbeat this often.
GUARDIAN_WORKER_METRICS_PORT = env_int("GUARDIAN_WORKER_METRICS_PORT", 0, minimum=0)
GUARDIAN_WORKER_METRICS_ADDRESS = env_str("GUARDIAN_WORKER_METRICS_ADDRESS", "127.0.0.1")
GUARDIAN_WORKER_HEARTBEAT_SECONDS = env_float(
    "GUARDIAN_WORKER_HEARTBEAT_SECONDS", 15.0, minimum=0.1
)
