"""Settings come from the environment; a bad value is one clear line naming the variable."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from guardian_core.env import (
    broker_from_url,
    database_from_url,
    env_bool,
    env_int,
    env_json_priors,
    redact_url,
)
from tests.processes import run_manage

CLOSED_PORT_DB = "postgres://guardian:s3cret@127.0.0.1:9/guardian"
CLOSED_PORT_BROKER = "redis://:hunter2@127.0.0.1:9/0"


def test_a_boolean_variable_with_a_garbage_value_is_refused(monkeypatch):
    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="DEBUG='maybe'"):
        env_bool("DEBUG", True)


def test_a_whole_number_variable_below_its_minimum_is_refused(monkeypatch):
    monkeypatch.setenv("SESSION_COOKIE_AGE", "5")
    with pytest.raises(ImproperlyConfigured, match="SESSION_COOKIE_AGE=5 is below"):
        env_int("SESSION_COOKIE_AGE", 3600, minimum=60)


def test_stated_live_priors_name_every_bad_entry_and_read_good_ones(monkeypatch):
    monkeypatch.setenv("GUARDIAN_LIVE_PRIORS", '{"integrity": 2, "weather": 0.1}')
    with pytest.raises(ImproperlyConfigured, match="GUARDIAN_LIVE_PRIORS") as caught:
        env_json_priors("GUARDIAN_LIVE_PRIORS")
    assert "integrity: must lie between" in str(caught.value)
    assert "weather: not a condition" in str(caught.value)
    monkeypatch.setenv("GUARDIAN_LIVE_PRIORS", '{"integrity": 0.05}')
    assert env_json_priors("GUARDIAN_LIVE_PRIORS") == {"integrity": 0.05}


@pytest.mark.parametrize("value", ["Guardian_App", "app; drop table x", "1app", "a" * 64, "app-1"])
def test_an_app_database_role_that_is_not_a_plain_role_name_is_refused(monkeypatch, value):
    from guardian_core.env import env_sql_role

    monkeypatch.setenv("GUARDIAN_DB_APP_ROLE", value)
    with pytest.raises(ImproperlyConfigured, match="GUARDIAN_DB_APP_ROLE=.* is not a plain"):
        env_sql_role("GUARDIAN_DB_APP_ROLE")


def test_a_plain_app_database_role_is_read_and_none_means_one_role(monkeypatch):
    from guardian_core.env import env_sql_role

    monkeypatch.setenv("GUARDIAN_DB_APP_ROLE", " guardian_app ")
    assert env_sql_role("GUARDIAN_DB_APP_ROLE") == "guardian_app"
    monkeypatch.delenv("GUARDIAN_DB_APP_ROLE")
    assert env_sql_role("GUARDIAN_DB_APP_ROLE") == ""


def test_sqlite_runs_in_wal_mode_with_immediate_transactions_and_a_busy_timeout(tmp_path):
    config = database_from_url(f"sqlite:///{tmp_path / 'g.sqlite3'}", sqlite_test_name=tmp_path)
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert config["OPTIONS"]["timeout"] >= 5
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]


def test_an_in_memory_sqlite_database_is_refused(tmp_path):
    # The web server and the worker are separate processes: memory cannot be shared.
    with pytest.raises(ImproperlyConfigured, match="SQLite file"):
        database_from_url("sqlite://:memory:", sqlite_test_name=tmp_path)


def test_the_filesystem_broker_needs_no_server_and_keeps_its_queue_under_var(tmp_path):
    url, options, results = broker_from_url("filesystem://", var_dir=tmp_path)
    assert url.startswith("filesystem://")
    assert options["data_folder_in"] == options["data_folder_out"]
    assert (tmp_path / "broker" / "queue").is_dir()
    assert results.startswith("file://")


def test_an_unknown_broker_scheme_names_the_variable(tmp_path):
    with pytest.raises(ImproperlyConfigured, match="CELERY_BROKER_URL"):
        broker_from_url("amqp://rabbit", var_dir=tmp_path)


def test_passwords_are_redacted_from_urls_in_messages():
    assert redact_url(CLOSED_PORT_DB) == "postgres://guardian:***@127.0.0.1:9/guardian"
    assert redact_url("filesystem://") == "filesystem://"


def test_the_embedded_default_sqlite_file_is_really_in_wal_mode(tmp_path):
    result = run_manage(
        "shell",
        "-c",
        "from django.db import connection;"
        "c = connection.cursor(); c.execute('PRAGMA journal_mode'); print(c.fetchone()[0])",
        DATABASE_URL=None,
        CELERY_BROKER_URL=None,
        GUARDIAN_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "wal"
    assert (tmp_path / "guardian.sqlite3").exists()


def test_debug_off_without_a_secret_key_is_a_one_line_startup_error():
    result = run_manage("check", DEBUG="false", SECRET_KEY=None)
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cookies_are_secure_and_http_only_outside_debug():
    result = run_manage(
        "shell",
        "-c",
        "from django.conf import settings as s;"
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SESSION_COOKIE_HTTPONLY)",
        DEBUG="false",
        SECRET_KEY="a-test-key-with-enough-different-characters-to-pass-the-check",
        ALLOWED_HOSTS="guardian.example",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "True True True"


def test_a_wrong_database_url_scheme_is_one_line_naming_the_variable():
    result = run_manage("migrate", DATABASE_URL="mysql://root@localhost/guardian")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "guardian: configuration error: DATABASE_URL has the unsupported scheme 'mysql'; "
        "use sqlite:////absolute/path.sqlite3 or postgres://user:password@host:port/name."
    ]


def test_an_unreachable_database_is_one_line_naming_the_variable_without_the_password():
    result = run_manage("migrate", DATABASE_URL=CLOSED_PORT_DB)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("guardian: cannot use the database at DATABASE_URL=postgres://")
    assert "s3cret" not in result.stderr


def test_preflight_names_each_unreachable_setting_on_one_line():
    result = run_manage(
        "preflight", DATABASE_URL=CLOSED_PORT_DB, CELERY_BROKER_URL=CLOSED_PORT_BROKER
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert "DATABASE_URL=postgres://guardian:***@127.0.0.1:9/guardian" in lines[0]
    assert "CELERY_BROKER_URL=redis://:***@127.0.0.1:9/0" in lines[1]
    assert "hunter2" not in result.stderr


def test_preflight_passes_on_the_configured_services():
    result = run_manage("preflight")
    assert result.returncode == 0, result.stderr
    assert "database: ok" in result.stdout
    assert "broker: ok" in result.stdout


def test_every_environment_variable_the_settings_read_is_in_env_example():
    import re

    from tests.processes import REPO

    source = (REPO / "guardian_core" / "settings.py").read_text()
    source += (REPO / "guardian_core" / "env.py").read_text()
    read = set(re.findall(r'env_(?:str|bool|int|float|list|secret_key)\(\s*"([A-Z_]+)"', source))
    documented = (REPO / ".env.example").read_text()
    assert read, "no variables found: the pattern no longer matches the settings"
    assert sorted(name for name in read if f"{name}=" not in documented) == []


def test_behind_a_transaction_pooler_server_side_cursors_can_be_turned_off(monkeypatch):
    # PgBouncer in transaction pooling cannot keep a named cursor across transactions: the
    # streamed reads (replay, exports, verify_log) must then use client-side cursors.
    url = "postgres://app:app@127.0.0.1:5432/guardian"
    unused = Path("unused.sqlite3")
    assert database_from_url(url, sqlite_test_name=unused)["DISABLE_SERVER_SIDE_CURSORS"] is False
    monkeypatch.setenv("DATABASE_DISABLE_SERVER_SIDE_CURSORS", "true")
    assert database_from_url(url, sqlite_test_name=unused)["DISABLE_SERVER_SIDE_CURSORS"] is True


def test_the_servers_language_is_french_when_set_and_a_third_is_refused_by_name():
    said = run_manage(
        "shell",
        "-c",
        "from django.utils.translation import gettext; print(gettext('New escalation'))",
        GUARDIAN_LANGUAGE="fr",
    )
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip().splitlines()[-1] == "Nouvelle escalade"

    refused = run_manage("check", GUARDIAN_LANGUAGE="de")
    assert refused.returncode != 0
    assert "GUARDIAN_LANGUAGE='de' is not one of en, fr." in refused.stderr
    assert "Traceback" not in refused.stderr
