"""Typed readers for the environment variables the settings are built from, and the .env loader.

Each reader fails loudly with ImproperlyConfigured naming the variable, so that a typo in a
deployment is a clear startup error instead of a silently wrong setting.
"""

import json
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_DOTENV_LINE = re.compile(r"(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*)")
_DOUBLE_QUOTED_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "$": "$"}


def dotenv_values(text: str, *, source: str = ".env") -> dict[str, str]:
    r"""The NAME=value pairs of a .env file's text.

    One variable a line; blank lines and lines starting with # are skipped; `export ` before
    the name is allowed. A value may be 'single-quoted' (kept as written), "double-quoted"
    (with the escapes \n \t \" \\ \$) or bare (a # after a blank starts a comment; blanks
    around the value are dropped). Every bad line is named in one ImproperlyConfigured, by
    number and never by content: a malformed line may hold a secret.
    """
    values: dict[str, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _DOTENV_LINE.fullmatch(line)
        if match is None:
            problems.append(f"line {number} is not NAME=value")
            continue
        try:
            values[match["name"]] = _dotenv_value(match["value"])
        except ValueError as exc:
            problems.append(f"line {number} ({match['name']}): {exc}")
    if problems:
        raise ImproperlyConfigured(f"{source} cannot be read: " + "; ".join(problems))
    return values


def _dotenv_value(raw: str) -> str:
    if raw[:1] in {"'", '"'}:
        quote = raw[0]
        end = _closing_quote(raw, quote)
        if end < 0:
            raise ValueError(f"the value opens with {quote} but never closes it")
        rest = raw[end + 1 :].strip()
        if rest and not rest.startswith("#"):
            raise ValueError(f"text follows the closing {quote}")
        body = raw[1:end]
        if quote == "'":
            return body
        return re.sub(r"\\(.)", lambda m: _DOUBLE_QUOTED_ESCAPES.get(m[1], m[0]), body)
    # A bare value ends at a comment that follows a blank: `a#b` keeps its #.
    return re.split(r"\s#", raw, maxsplit=1)[0].strip()


def _closing_quote(raw: str, quote: str) -> int:
    index = 1
    while index < len(raw):
        if raw[index] == "\\" and quote == '"':
            index += 2
            continue
        if raw[index] == quote:
            return index
        index += 1
    return -1


def load_dotenv(path: Path) -> list[str]:
    """Put the variables of the .env file at `path` into os.environ, unless already set there.

    The environment wins: a variable set in the shell, by docker compose or by a test is never
    replaced by the file (set to "" counts as set). A missing file is no error. Returns the
    names taken from the file.
    """
    try:
        # utf-8-sig: an editor's byte-order mark is not part of the first name.
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return []
    taken = []
    for name, value in dotenv_values(text, source=str(path)).items():
        if name not in os.environ:
            os.environ[name] = value
            taken.append(name)
    return taken


def load_project_dotenv(project_root: Path) -> list[str]:
    """Read the project's .env file (see load_dotenv): `project_root / ".env"`, or the file
    GUARDIAN_ENV_FILE names; GUARDIAN_ENV_FILE="" reads none (the tests' child processes)."""
    named = os.environ.get("GUARDIAN_ENV_FILE")
    if named is None:
        return load_dotenv(project_root / ".env")
    if not named.strip():
        return []
    path = Path(named.strip())
    if not path.is_file():
        raise ImproperlyConfigured(f"GUARDIAN_ENV_FILE={named!r} is not a file.")
    return load_dotenv(path)


def env_str(name: str, default: str = "") -> str:
    """The variable's value with surrounding blanks removed, or `default` when unset."""
    return os.environ.get(name, default).strip()


# Django's own bar for a key that signs sessions, CSRF tokens and password-reset links
# (django.core.checks.security.base, check security.W009), refused here instead of warned.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5
_INSECURE_PREFIX = "django-insecure-"


def env_secret_key(name: str, *, debug: bool, development_key: str) -> str:
    """A signing key: with DEBUG on, `development_key` when unset; with DEBUG off, required and
    strong (50 characters or more, 5 of them different, not one of Django's insecure keys).
    The message never shows the key."""
    value = env_str(name)
    if not value:
        if debug:
            return development_key
        raise ImproperlyConfigured(
            f"{name} is not set. With DEBUG off it is required: set it to a long random "
            "string (python -c 'import secrets; print(secrets.token_urlsafe(50))')."
        )
    if debug:
        return value
    weak = (
        len(value) < SECRET_KEY_MIN_LENGTH
        or len(set(value)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS
        or value.startswith(_INSECURE_PREFIX)
    )
    if weak:
        raise ImproperlyConfigured(
            f"{name} is too weak to run with DEBUG off: it needs at least "
            f"{SECRET_KEY_MIN_LENGTH} characters, {SECRET_KEY_MIN_UNIQUE_CHARACTERS} of them "
            f"different, and must not start with {_INSECURE_PREFIX!r} "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))')."
        )
    return value


def env_choice(name: str, default: str, choices: list[str]) -> str:
    """One of `choices`, or `default` when unset or blank."""
    value = env_str(name) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}.")
    return value


def env_bool(name: str, default: bool) -> bool:
    """A boolean written as 1/0, true/false, yes/no or on/off (any case)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use true or false.")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """A whole number no smaller than `minimum`."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum of {minimum}.")
    return value


def env_float(
    name: str, default: float, *, minimum: float = 0.0, maximum: float | None = None
) -> float:
    """A finite number no smaller than `minimum` (and no larger than `maximum` when given)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None
    if maximum is not None and not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be a number from {minimum} to {maximum}.")
    if not value >= minimum or value == float("inf"):
        raise ImproperlyConfigured(f"{name}={raw!r} must be a finite number ≥ {minimum}.")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blanks around items are dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


_SQL_ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def env_sql_role(name: str) -> str:
    """A PostgreSQL role name as written unquoted (lower-case letters, digits and _, at most
    63 characters), or "" when unset: it goes into GRANT statements."""
    value = env_str(name)
    if value and not _SQL_ROLE.fullmatch(value):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a plain PostgreSQL role name: use lower-case letters, "
            "digits and _ (not starting with a digit), at most 63 characters."
        )
    return value


def env_json_prices(name: str) -> dict:
    """Model prices as JSON (see guardian_core.adapters.pricing.price_table); {} when unset."""
    from guardian_core.adapters.pricing import price_table

    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        return price_table(json.loads(raw))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ImproperlyConfigured(f"{name} is not a valid price table: {exc}") from None


def env_json_onnx_models(name: str) -> dict:
    """{condition: model directory} as JSON (see guardian_core.adapters.onnx_config.
    onnx_routes); {} when unset. The message names every bad entry."""
    from guardian_core.adapters.onnx_config import onnx_routes

    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        return onnx_routes(json.loads(raw))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def env_json_priors(name: str) -> dict:
    """{condition: live prior} as JSON (see guardian_core.engine.priors.prior_table); {} when
    unset. The message names every bad entry."""
    from guardian_core.engine.priors import prior_table

    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        return prior_table(json.loads(raw))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def database_from_url(url: str, *, sqlite_test_name: Path) -> dict:
    """Django's DATABASES['default'] for a sqlite:/// or postgres:// URL.

    SQLite gets WAL mode, a busy timeout and IMMEDIATE transactions: the web server and the
    worker write at the same time, and a deferred transaction that later needs the write
    lock fails at once with "database is locked" instead of waiting its turn.
    """
    scheme = urlsplit(url).scheme
    if scheme not in {"sqlite", "postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL has the unsupported scheme {scheme!r}; "
            "use sqlite:////absolute/path.sqlite3 or postgres://user:password@host:port/name."
        )
    try:
        config = dj_database_url.parse(url, conn_health_checks=True)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL cannot be read: {exc}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        if not config.get("NAME") or config["NAME"] == ":memory:":
            raise ImproperlyConfigured(
                "DATABASE_URL must name a SQLite file (sqlite:////absolute/path.sqlite3): "
                "the web server and the worker are separate processes and share it."
            )
        Path(config["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        config["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # A file, not :memory:, so that a worker process started by a test sees the test data.
        config["TEST"] = {"NAME": str(sqlite_test_name)}
    else:
        # A database host that drops packets would otherwise hold a request (and /healthz)
        # for the operating system's TCP timeout, minutes; a URL's own connect_timeout wins.
        config.setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
        # Behind PgBouncer in transaction pooling a cursor cannot outlive its transaction's
        # server connection: the streamed reads (replay, exports, verify_log) then fetch in
        # chunks from client-side cursors instead (docs/OPERATIONS.md).
        config["DISABLE_SERVER_SIDE_CURSORS"] = env_bool(
            "DATABASE_DISABLE_SERVER_SIDE_CURSORS", False
        )
    # Keep connections open between requests and tasks: Celery closes a connection after every
    # task unless it may live on, and reconnecting costs more than a whole turn's queries.
    config["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 600)
    return config


def redact_url(url: str) -> str:
    """The URL with any password replaced by ***, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def broker_from_url(url: str, *, var_dir: Path) -> tuple[str, dict, str]:
    """(broker URL, transport options, result backend URL) for a filesystem:// or redis:// URL.

    filesystem:// is the embedded default: kombu keeps the queue as files under var/, so a
    real worker process runs with no server at all.
    """
    scheme = urlsplit(url).scheme
    if scheme == "filesystem":
        queue = var_dir / "broker" / "queue"
        control = var_dir / "broker" / "control"
        results = var_dir / "broker" / "results"
        for folder in (queue, control, results):
            folder.mkdir(parents=True, exist_ok=True)
        options = {
            "data_folder_in": str(queue),
            "data_folder_out": str(queue),
            "control_folder": str(control),
            "store_processed": False,
            # The consumer polls the folder; 0.1 s keeps a turn from waiting a whole second.
            "polling_interval": 0.1,
        }
        # kombu ignores the host of this transport but warns when there is none.
        return "filesystem://localhost//", options, f"file://{results}"
    if scheme in {"redis", "rediss"}:
        return url, {"visibility_timeout": 3600}, url
    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL has the unsupported scheme {scheme!r}; "
        "use filesystem:// (embedded, no server) or redis://host:port/db."
    )
