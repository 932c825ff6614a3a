"""The gateway's configuration file (TOML): what it reads, what it checks, what it holds.

Framework-free: `load_config` reads and validates the file and nothing else. Every problem is
reported at once, each with the path of the field it is about ("servers[1].command: ..."), so
an operator fixes the file in one pass. Checks that need the database (the token's user and
rights, the policy version) are the command's, at start.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

# The guardian adapters a run may name (runs.validation.GUARDIANS; a test keeps them equal).
# Copied rather than imported: this module loads without Django.
GUARDIANS = ("scripted", "local", "onnx", "http", "openai")
RISK_CLASSES = ("read_only", "reversible_write", "irreversible", "regulated")
# A server's name ends its tools' names on a clash ("<tool>__<server>"), so it must fit
# in the names both Guardian and MCP clients accept.
_SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z\-]+$"

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "guardian", "goal", "servers"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 120},
        "token": {"type": "string", "minLength": 1},
        "token_env": {"type": "string", "pattern": _ENV_NAME},
        "guardian": {"enum": list(GUARDIANS)},
        "policy_version": {"type": "integer", "minimum": 1},
        "hold_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
        # Each session's run's budgets (runs/validation.py): a long session needs more turns.
        "budgets": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "max_turns": {"type": "integer", "minimum": 1},
                "max_tokens": {"type": "integer", "minimum": 1},
                "max_cost": {"type": "number", "exclusiveMinimum": 0},
                "max_wall_seconds": {"type": "number", "exclusiveMinimum": 0},
            },
        },
        "goal": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": 4000},
                "header": {"type": "string", "pattern": _HEADER_NAME},
                "env": {"type": "string", "pattern": _ENV_NAME},
            },
        },
        "http": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "host": {"type": "string", "minLength": 1},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "path": {"type": "string", "pattern": "^/"},
            },
        },
        "servers": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": _SERVER_NAME},
                    "command": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "string", "minLength": 1},
                    },
                    "env": _STRING_MAP,
                    "cwd": {"type": "string", "minLength": 1},
                    "url": {"type": "string", "pattern": "^https?://"},
                    "headers": _STRING_MAP,
                    "risk_classes": {
                        "type": "object",
                        "additionalProperties": {"enum": list(RISK_CLASSES)},
                    },
                },
            },
        },
    },
}


class ConfigError(ValueError):
    """The configuration file cannot be used; `problems` names every bad field."""

    def __init__(self, path: str | os.PathLike, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{path}: the gateway's configuration has problems:\n{lines}")


@dataclass(frozen=True)
class GoalSource:
    """Where a session's goal comes from: fixed text, a request header (HTTP), an environment
    variable (stdio). The first that gives a non-empty value wins, in that order: header, env,
    text (the text is the fallback)."""

    text: str = ""
    header: str = ""
    env: str = ""


@dataclass(frozen=True)
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    path: str = "/mcp"


@dataclass(frozen=True)
class ServerConfig:
    """One upstream MCP server: a command to start (stdio) or a URL (Streamable HTTP)."""

    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    risk_classes: Mapping[str, str] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


@dataclass(frozen=True)
class GatewayConfig:
    name: str
    guardian: str
    goal: GoalSource
    servers: tuple[ServerConfig, ...]
    token: str = ""
    token_env: str = ""
    policy_version: int | None = None
    hold_seconds: float = 60.0
    budgets: Mapping[str, float] = field(default_factory=dict)
    http: HttpSettings = field(default_factory=HttpSettings)

    def api_token(self, environ: Mapping[str, str] | None = None) -> str:
        """The configured token: given inline, or read from `token_env` now."""
        if self.token:
            return self.token
        if self.token_env:
            return (os.environ if environ is None else environ).get(self.token_env, "")
        return ""

    def overrides(self) -> dict[str, dict[str, str]]:
        """The admin's risk class per tool, per server: {server: {upstream tool: class}}."""
        return {server.name: dict(server.risk_classes) for server in self.servers}


def _path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _schema_problems(data: dict) -> list[str]:
    validator = Draft202012Validator(SCHEMA)
    problems = []
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.path]):
        problems.append(f"{_path(error.absolute_path)}: {error.message}")
    return problems


def _rule_problems(data: dict) -> list[str]:
    """What a JSON Schema says poorly: one of two fields, names unique."""
    problems = []
    token, token_env = "token" in data, "token_env" in data
    if token == token_env:
        problems.append("token: give `token` or `token_env` (an environment variable), one of them")
    servers = data.get("servers")
    if isinstance(servers, list):
        seen: set[str] = set()
        for index, server in enumerate(servers):
            if not isinstance(server, dict):
                continue
            where = f"servers[{index}]"
            if ("command" in server) == ("url" in server):
                problems.append(f"{where}: give `command` (stdio) or `url` (HTTP), one of them")
            if "url" in server and ("env" in server or "cwd" in server):
                problems.append(f"{where}: `env` and `cwd` are for a `command`, not a `url`")
            if "command" in server and "headers" in server:
                problems.append(f"{where}.headers: headers are for a `url`, not a `command`")
            name = server.get("name")
            if isinstance(name, str):
                if name in seen:
                    problems.append(f"{where}.name: {name!r} names two servers")
                seen.add(name)
    return problems


def parse_config(data: dict, *, source: str | os.PathLike = "<config>") -> GatewayConfig:
    """A GatewayConfig from the TOML document's data; ConfigError naming every problem."""
    problems = _schema_problems(data) + _rule_problems(data)
    if problems:
        raise ConfigError(source, problems)
    goal = data["goal"]
    http = data.get("http", {})
    servers = tuple(
        ServerConfig(
            name=server["name"],
            command=tuple(server.get("command", ())),
            env=dict(server.get("env", {})),
            cwd=server.get("cwd", ""),
            url=server.get("url", ""),
            headers=dict(server.get("headers", {})),
            risk_classes=dict(server.get("risk_classes", {})),
        )
        for server in data["servers"]
    )
    return GatewayConfig(
        name=data["name"],
        guardian=data["guardian"],
        goal=GoalSource(
            text=goal.get("text", ""), header=goal.get("header", ""), env=goal.get("env", "")
        ),
        servers=servers,
        token=data.get("token", ""),
        token_env=data.get("token_env", ""),
        policy_version=data.get("policy_version"),
        hold_seconds=float(data.get("hold_seconds", 60)),
        budgets=dict(data.get("budgets", {})),
        http=HttpSettings(
            host=http.get("host", "127.0.0.1"),
            port=http.get("port", 8765),
            path=http.get("path", "/mcp"),
        ),
    )


def load_config(path: str | os.PathLike) -> GatewayConfig:
    """Read and check the gateway's TOML file; ConfigError naming every bad field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, [f"cannot be read: {exc.strerror or exc}"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, [f"not TOML: {exc}"]) from None
    return parse_config(data, source=path)
