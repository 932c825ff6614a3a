"""Shared fixtures: personas (one user per role), the browser launch, and the suite's header."""

import os

import pytest
from django.conf import settings
from django.contrib.auth.models import Group

from guardian_core.env import redact_url

# Playwright's sync API runs an event loop in the test thread; Django's live server and ORM
# calls from that thread are safe here because each test drives one browser at a time.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

PERSONA_PASSWORD = "correct horse battery staple"


def pytest_configure(config) -> None:
    """Compile the translations the pages speak (locale/*/django.po) when a .mo is missing or
    older than its .po, so a bare `pytest` renders French as `make demo` does."""
    import polib

    for root in settings.LOCALE_PATHS:
        for po_path in root.glob("*/LC_MESSAGES/*.po"):
            mo_path = po_path.with_suffix(".mo")
            if mo_path.exists() and mo_path.stat().st_mtime >= po_path.stat().st_mtime:
                continue
            # Written aside then renamed: two pytest processes may compile at once.
            partial = mo_path.with_suffix(f".mo.{os.getpid()}")
            polib.pofile(str(po_path)).save_as_mofile(str(partial))
            os.replace(partial, mo_path)


def pytest_report_header(config) -> list[str]:
    """Say which database and broker the suite runs on, so a CI log proves it."""
    database = settings.DATABASES["default"]
    if database.get("HOST"):
        port = database.get("PORT") or 5432
        where = f"{database['HOST']}:{port} (test database of {database['NAME']})"
    else:
        where = database["TEST"].get("NAME") or database["NAME"]
    return [
        f"guardian database: {database['ENGINE'].rsplit('.', 1)[-1]} at {where}",
        f"guardian broker: {redact_url(settings.CELERY_BROKER_URL)}",
    ]


@pytest.fixture(autouse=True)
def _no_policy_from_another_test():
    # A rolled-back test's policy version id can come back in the next test (SQLite), with
    # another number: the per-process policies and the chain's policy numbers are dropped.
    from runs import chain
    from runs.mapping import forget_policies

    def forget() -> None:
        forget_policies()
        chain._POLICY_NUMBERS.clear()

    forget()
    yield
    forget()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _scripted_adapters_allowed(settings) -> None:
    """The tests play scenarios whatever DEBUG the suite runs with; the tests of the setting
    itself turn it off with override_settings."""
    settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = True


@pytest.fixture(autouse=True)
def _no_audit_samples_unless_asked(settings) -> None:
    """No turn is drawn for audit (GUARDIAN_AUDIT_SAMPLE_SHARE, 0.02 by default): the draw
    hangs on ids and the log's key, so a test counting escalations would fail now and then.
    The audit sampling tests set their share."""
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 0.0


@pytest.fixture(autouse=True)
def _suite_judge_models_registered(settings) -> None:
    """The judge models the suite's policy versions name are registered, as a deployment
    registers its own (GUARDIAN_JUDGE_MODELS); tests of the check set their own list."""
    settings.GUARDIAN_JUDGE_MODELS = ["judge-8b-2026-11", "judge-7b"]


def _persona(django_user_model, username: str, *roles: str):
    user = django_user_model.objects.create_user(username=username, password=PERSONA_PASSWORD)
    user.groups.set(Group.objects.filter(name__in=roles))
    return user


@pytest.fixture
def reviewer(db, django_user_model):
    return _persona(django_user_model, "reviewer", "reviewer")


@pytest.fixture
def other_reviewer(db, django_user_model):
    return _persona(django_user_model, "other_reviewer", "reviewer")


@pytest.fixture
def auditor(db, django_user_model):
    return _persona(django_user_model, "auditor", "auditor")


@pytest.fixture
def integrator(db, django_user_model):
    """A machine's user: its agent loop runs elsewhere and drives external runs."""
    return _persona(django_user_model, "integrator", "integrator")


@pytest.fixture
def admin(db, django_user_model):
    user = _persona(django_user_model, "admin", "admin")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return user


@pytest.fixture
def outsider(db, django_user_model):
    """Signed in, but holds no role."""
    return _persona(django_user_model, "outsider")


CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def pytest_collection_modifyitems(config, items) -> None:
    """Without Chromium, a developer's run skips the browser tests and says why; CI never does
    (CI=true makes a missing browser a failure, not a skip). On the embedded SQLite the tests
    marked `postgresql(reason=...)` are skipped with their reason."""
    _skip_postgresql_only(items)
    if os.path.exists(CHROMIUM) or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason=f"no Chromium at {CHROMIUM}: install it or set CHROMIUM_PATH")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


def _skip_postgresql_only(items) -> None:
    """One marker for every test SQLite cannot run, so `-m postgresql` lists them all; a mark
    without a reason is refused, so each skip says what SQLite lacks."""
    from django.db import connection

    for item in items:
        marker = item.get_closest_marker("postgresql")
        if marker is None:
            continue
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
        if not reason:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.postgresql needs a reason=")
        if connection.vendor != "postgresql":
            item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {reason}"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args) -> dict:
    """Debian's Chromium, with its calls home switched off (this machine has no network)."""
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-quic",
        ],
    }


@pytest.fixture(autouse=True)
def _fresh_log_caches():
    """The log's per-process caches key a policy version by its id (runs/chain.py), which
    PostgreSQL never reuses; SQLite does after a test's rollback: each test starts without
    them, as a new worker process would."""
    from runs import chain

    chain._POLICY_NUMBERS.clear()
    chain._HEADERS.clear()
