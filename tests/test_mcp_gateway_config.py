"""The gateway's configuration file: what it accepts, and every problem named with its path."""

import pytest

from mcp_gateway.config import GUARDIANS, ConfigError, load_config, parse_config
from runs.validation import GUARDIANS as RUN_GUARDIANS

GOOD = """
name = "desk"
token_env = "GATEWAY_TOKEN"
guardian = "local"
policy_version = 3
hold_seconds = 5

[budgets]
max_turns = 50

[goal]
text = "Tidy the shared drive"
header = "X-Guardian-Goal"

[http]
port = 9000

[[servers]]
name = "files"
command = ["python", "files.py"]
env = { ROOT = "/tmp/x" }
cwd = "/tmp"
risk_classes = { delete = "regulated" }

[[servers]]
name = "web"
url = "http://127.0.0.1:8001/mcp"
headers = { Authorization = "Bearer abc" }
"""


def _write(tmp_path, text: str):
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_a_good_file_is_read_into_frozen_settings_with_defaults_filled_in(tmp_path):
    config = load_config(_write(tmp_path, GOOD))
    assert config.name == "desk"
    assert config.guardian == "local"
    assert config.policy_version == 3
    assert config.hold_seconds == 5.0
    assert config.budgets == {"max_turns": 50}
    assert config.goal.text == "Tidy the shared drive"
    assert config.goal.header == "X-Guardian-Goal"
    assert (config.http.host, config.http.port, config.http.path) == ("127.0.0.1", 9000, "/mcp")
    files, web = config.servers
    assert files.command == ("python", "files.py")
    assert files.transport == "stdio"
    assert files.env == {"ROOT": "/tmp/x"}
    assert files.cwd == "/tmp"
    assert web.url == "http://127.0.0.1:8001/mcp"
    assert web.transport == "http"
    assert web.headers == {"Authorization": "Bearer abc"}
    assert config.overrides() == {"files": {"delete": "regulated"}, "web": {}}
    assert config.api_token({"GATEWAY_TOKEN": "secret"}) == "secret"
    with pytest.raises(AttributeError):
        config.name = "other"  # frozen


def test_hold_seconds_defaults_to_a_minute_and_the_policy_to_the_active_one(tmp_path):
    config = load_config(
        _write(
            tmp_path,
            'name = "n"\ntoken = "t"\nguardian = "local"\n[goal]\nenv = "GOAL"\n'
            '[[servers]]\nname = "s"\nurl = "http://x/mcp"\n',
        )
    )
    assert config.hold_seconds == 60.0
    assert config.policy_version is None
    assert config.api_token({}) == "t"


def test_every_bad_field_is_named_with_its_path_at_once(tmp_path):
    text = """
name = ""
token = "t"
token_env = "ALSO"
guardian = "oracle"
hold_seconds = -1
surprise = 1

[goal]

[http]
port = 70000

[[servers]]
name = "a b"
command = []

[[servers]]
name = "web"
url = "ftp://x"
command = ["x"]
risk_classes = { t = "harmless" }

[[servers]]
name = "web"
"""
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, text))
    problems = "\n".join(caught.value.problems)
    for where in (
        "name:",
        "guardian:",
        "hold_seconds:",
        "(top level): Additional properties",
        "goal:",
        "http.port:",
        "servers[0].name:",
        "servers[0].command:",
        "servers[1].url:",
        "servers[1]: give `command` (stdio) or `url` (HTTP), one of them",
        "servers[1].risk_classes.t:",
        "servers[2]: give `command`",
        "servers[2].name: 'web' names two servers",
        "token: give `token` or `token_env`",
    ):
        assert where in problems, where
    assert str(caught.value).count("\n  - ") == len(caught.value.problems)


def test_missing_required_fields_are_each_named(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, 'name = "n"\n'))
    problems = "\n".join(caught.value.problems)
    for field in ("'guardian' is a required property", "'goal'", "'servers'", "token:"):
        assert field in problems


def test_a_file_that_is_not_toml_or_not_there_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not TOML"):
        load_config(_write(tmp_path, "name = \n"))
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path / "missing.toml")


def test_headers_belong_to_urls_and_env_to_commands():
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {
                "name": "n",
                "token": "t",
                "guardian": "local",
                "goal": {"text": "g"},
                "servers": [
                    {"name": "a", "command": ["x"], "headers": {"A": "b"}},
                    {"name": "b", "url": "http://x", "env": {"A": "b"}},
                ],
            }
        )
    problems = "\n".join(caught.value.problems)
    assert "servers[0].headers:" in problems
    assert "servers[1]: `env` and `cwd` are for a `command`" in problems


def test_the_guardians_are_those_a_run_accepts():
    assert GUARDIANS == RUN_GUARDIANS
