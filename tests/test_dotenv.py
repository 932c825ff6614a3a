"""The .env file: how its lines read, and that the environment always wins over it."""

import os

import pytest
from django.core.exceptions import ImproperlyConfigured

from guardian_core.env import dotenv_values, load_dotenv, load_project_dotenv
from tests.processes import run_manage


@pytest.fixture
def environ_restored():
    """os.environ as it was before the test, whatever the loader put in."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


def test_names_values_comments_and_quotes_read_as_a_shell_would():
    text = "\n".join(
        [
            "# a comment",
            "",
            "PLAIN=value",
            "  SPACED  =  padded value  ",
            "export EXPORTED=yes",
            "COMMENTED=kept # dropped",
            "HASH=a#b",
            "EMPTY=",
            "SINGLE='single # not a comment  '",
            'DOUBLE="line\\none \\"q\\" \\\\ \\$HOME" # dropped',
            "URL=postgres://u:p@h:5432/db?sslmode=require",
            "EQUALS=a=b=c",
        ]
    )
    assert dotenv_values(text) == {
        "PLAIN": "value",
        "SPACED": "padded value",
        "EXPORTED": "yes",
        "COMMENTED": "kept",
        "HASH": "a#b",
        "EMPTY": "",
        "SINGLE": "single # not a comment  ",
        "DOUBLE": 'line\none "q" \\ $HOME',
        "URL": "postgres://u:p@h:5432/db?sslmode=require",
        "EQUALS": "a=b=c",
    }


def test_windows_line_ends_and_a_byte_order_mark_are_read(tmp_path, environ_restored):
    path = tmp_path / ".env"
    path.write_bytes("\ufeffGUARDIAN_TEST_A=1\r\nGUARDIAN_TEST_B='two'\r\n".encode())
    os.environ.pop("GUARDIAN_TEST_A", None)
    os.environ.pop("GUARDIAN_TEST_B", None)

    assert load_dotenv(path) == ["GUARDIAN_TEST_A", "GUARDIAN_TEST_B"]
    assert (os.environ["GUARDIAN_TEST_A"], os.environ["GUARDIAN_TEST_B"]) == ("1", "two")


def test_every_bad_line_is_named_by_number_without_its_content():
    text = 'GOOD=1\nSECRET KEY=hunter2\nOPEN=\'hunter3\nAFTER="x" hunter4\njust words\n'
    with pytest.raises(ImproperlyConfigured) as caught:
        dotenv_values(text, source="/srv/.env")
    message = str(caught.value)
    assert message.startswith("/srv/.env cannot be read: ")
    assert "line 2 is not NAME=value" in message
    assert "line 3 (OPEN): the value opens with ' but never closes it" in message
    assert 'line 4 (AFTER): text follows the closing "' in message
    assert "line 5 is not NAME=value" in message
    assert "hunter" not in message


def test_the_file_fills_in_only_what_the_environment_leaves_unset(
    tmp_path, monkeypatch, environ_restored
):
    path = tmp_path / ".env"
    path.write_text(
        "GUARDIAN_TEST_SET=from-file\nGUARDIAN_TEST_EMPTY=from-file\nGUARDIAN_TEST_NEW=1\n"
    )
    monkeypatch.setenv("GUARDIAN_TEST_SET", "from-environment")
    # Set to nothing still counts as set: the environment said so on purpose.
    monkeypatch.setenv("GUARDIAN_TEST_EMPTY", "")
    monkeypatch.delenv("GUARDIAN_TEST_NEW", raising=False)

    taken = load_dotenv(path)

    assert taken == ["GUARDIAN_TEST_NEW"]
    assert os.environ["GUARDIAN_TEST_SET"] == "from-environment"
    assert os.environ["GUARDIAN_TEST_EMPTY"] == ""
    assert os.environ["GUARDIAN_TEST_NEW"] == "1"


def test_a_missing_file_is_no_error(tmp_path):
    assert load_dotenv(tmp_path / ".env") == []


def test_the_project_root_dot_env_is_read_unless_guardian_env_file_says_otherwise(
    tmp_path, monkeypatch, environ_restored
):
    (tmp_path / ".env").write_text("GUARDIAN_TEST_ROOT=root\n")
    other = tmp_path / "other.env"
    other.write_text("GUARDIAN_TEST_OTHER=other\n")
    monkeypatch.delenv("GUARDIAN_TEST_ROOT", raising=False)
    monkeypatch.delenv("GUARDIAN_TEST_OTHER", raising=False)

    monkeypatch.delenv("GUARDIAN_ENV_FILE", raising=False)
    assert load_project_dotenv(tmp_path) == ["GUARDIAN_TEST_ROOT"]
    monkeypatch.setenv("GUARDIAN_ENV_FILE", str(other))
    assert load_project_dotenv(tmp_path) == ["GUARDIAN_TEST_OTHER"]
    monkeypatch.setenv("GUARDIAN_ENV_FILE", "")
    assert load_project_dotenv(tmp_path) == []
    monkeypatch.setenv("GUARDIAN_ENV_FILE", str(tmp_path / "missing.env"))
    with pytest.raises(ImproperlyConfigured, match="GUARDIAN_ENV_FILE=.*is not a file"):
        load_project_dotenv(tmp_path)


PRINT_SETTINGS = "from django.conf import settings as s; print(s.TIME_ZONE)"


def test_manage_py_reads_the_file_and_the_environment_wins(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# demo settings\nTIME_ZONE='Europe/Paris'\n")

    from_file = run_manage("shell", "-c", PRINT_SETTINGS, GUARDIAN_ENV_FILE=str(env_file))
    from_environment = run_manage(
        "shell", "-c", PRINT_SETTINGS, GUARDIAN_ENV_FILE=str(env_file), TIME_ZONE="Asia/Tokyo"
    )

    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout.splitlines()[-1] == "Europe/Paris"
    assert from_environment.returncode == 0, from_environment.stderr
    assert from_environment.stdout.splitlines()[-1] == "Asia/Tokyo"


def test_a_bad_env_file_is_one_line_naming_the_file_and_line(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("DEBUG=true\nSECRET_KEY='not closed\n")

    result = run_manage("check", GUARDIAN_ENV_FILE=str(env_file))

    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"guardian: configuration error: {env_file} cannot be read: "
        "line 2 (SECRET_KEY): the value opens with ' but never closes it"
    ]
