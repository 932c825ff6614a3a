"""What a run is started with, checked before the run exists: a run never starts on input it
can never run with, and never reaches the database with text the database cannot store.

`run_input_problems` names every problem at once, each as "field[.path]: what is wrong", so
that `run_start` can refuse with all of them and the API can answer 400 per field
(`problems_by_field`). A message never repeats a character that made the input bad (a NUL or
a lone surrogate would break the JSON answer itself): bad values and names are shown escaped.
"""

import math
import re
from collections.abc import Iterable, Mapping

from django.conf import settings
from django.utils.translation import gettext as _
from jsonschema import Draft202012Validator
from rest_framework import serializers

from guardian_core.adapters.scripted import scenario_problems
from runs.tools import tools_for_run

# "external": the run's loop runs in the caller's process and drives it through the API
# (runs/external.py); it may define tools of its own (config.tools).
ACTORS = ("scripted", "openai", "coder_reviewer", "external")
# "onnx": local ONNX classifiers for the conditions GUARDIAN_ONNX_MODELS names, the local
# guardian for the others (runs/ports.py onnx_guardian).
GUARDIANS = ("scripted", "local", "onnx", "http", "openai")

# Bounds on what a caller may hand in. A scenario file is a few KiB; a config a hundred times
# that is a mistake or an attack, and so is nesting deeper than any adapter reads. Both are
# checked without recursion, so a config nested 100 000 levels deep is refused, not a crash.
MAX_DEPTH = 20
MAX_JSON_CHARS = 256 * 1024
MAX_GOAL_CHARS = 20_000
MAX_NAME_CHARS = 200

_INTEGER_BUDGETS = ("max_turns", "max_tokens")
_NUMBER_BUDGETS = ("max_cost", "max_wall_seconds")

_MODEL_NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}
# The settings each adapter reads from Run.config (see runs/ports.py and the review loop).
# "scenario" is checked on its own with the scripted adapters' scenario_problems.
_CONFIG_KEY_SCHEMAS: dict[str, dict] = {
    "scenario": {},
    "actor_model": _MODEL_NAME,
    "coder_model": _MODEL_NAME,
    "reviewer_model": _MODEL_NAME,
    "max_rounds": {"type": "integer", "minimum": 1, "maximum": 50},
    # The scripted coder and reviewer replies of the demo's coder/reviewer scenario.
    "review_loop": {
        "type": "object",
        "properties": {
            "coder": {"type": "array", "items": {"type": "string"}},
            "reviewer": {"type": "array", "items": {"type": "string"}},
            "max_rounds": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["coder", "reviewer"],
        "additionalProperties": False,
    },
    # A label: the demo names its runs after their scenario file.
    "name": {"type": "string", "maxLength": MAX_NAME_CHARS},
    # Marks a run the demo's traffic started (runs/demo_traffic.py), so it can be told apart.
    "demo_traffic": {"const": True},
    # An MCP session's run (mcp_gateway/guarding.py): the gateway, the client as it named
    # itself, and each tool's upstream server and name there.
    "mcp": {
        "type": "object",
        "properties": {
            "gateway": {"type": "string", "maxLength": MAX_NAME_CHARS},
            "client": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": MAX_NAME_CHARS},
                    "version": {"type": "string", "maxLength": MAX_NAME_CHARS},
                },
                "additionalProperties": False,
            },
            "upstreams": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 2,
                    "maxItems": 2,
                },
            },
        },
        "required": ["gateway", "client"],
        "additionalProperties": False,
    },
}
_ACTOR_CONFIG_KEYS = {
    "scripted": {"scenario"},
    "openai": {"actor_model"},
    "coder_reviewer": {"coder_model", "reviewer_model", "max_rounds", "review_loop", "scenario"},
    "external": {"tools", "mcp"},
}
_GUARDIAN_CONFIG_KEYS = {
    "scripted": {"scenario"},
    "local": set(),
    "onnx": set(),
    "http": set(),
    "openai": set(),
}
_COMMON_CONFIG_KEYS = {"name", "demo_traffic"}
_KEY_VALIDATORS = {key: Draft202012Validator(schema) for key, schema in _CONFIG_KEY_SCHEMAS.items()}


def run_input_problems(
    *,
    goal: object,
    acceptance_criteria: object,
    tools: object,
    actor: object,
    guardian: object,
    budgets: object,
    config: object,
) -> list[str]:
    """Every problem with a run's input, "field: message" each; [] when it can run.

    Takes any values (commands and the API hand over what they parsed), so a wrong type is a
    problem, never an exception.
    """
    problems: list[str] = []
    problems += _goal_problems(goal)
    problems += _text_list_problems("acceptance_criteria", acceptance_criteria)
    if actor == "external":
        problems += external_tool_problems(tools)
    else:
        tool_problems = _text_list_problems("tools", tools, required=True)
        if not tool_problems:
            try:
                tools_for_run(list(tools))
            except ValueError as exc:
                tool_problems.append(f"tools: {exc}")
        problems += tool_problems
    actor_ok = _name_problems("actor", actor, ACTORS, problems)
    guardian_ok = _name_problems("guardian", guardian, GUARDIANS, problems)
    budget_shape = _json_problems("budgets", budgets, default={})
    problems += budget_shape or _budget_problems(budgets or {})
    config_shape = _json_problems("config", config, default={})
    if config_shape:
        problems += config_shape
    elif actor_ok and guardian_ok:
        problems += _config_problems(actor, guardian, config or {})
    if actor_ok and guardian_ok:
        problems += _scripted_problems(actor, guardian, config or {})
        if not config_shape:
            problems += _installation_problems(actor, guardian, config or {})
    return problems


INLINE_TOOL_KEYS = ("name", "description", "parameters", "risk_class")
MAX_TOOLS = 64
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,120}$")


def external_tool_problems(tools: object) -> list[str]:
    """An external run's tools: names of registered tools, or definitions of its own
    ({name, description, parameters: a JSON Schema of the arguments, risk_class}), built as
    the engine builds a tool (a broken schema is refused here, not at the first call)."""
    if not isinstance(tools, list | tuple):
        return ["tools: " + _("must be a list of tool names or definitions")]
    if len(tools) > MAX_TOOLS:
        return ["tools: " + _("at most %(count)s tools") % {"count": MAX_TOOLS}]
    shape = _json_problems("tools", list(tools), default=[])
    if shape:
        return shape
    from guardian_core.engine.tools import Tool
    from runs.tools import tool_registry

    registry = tool_registry()
    problems, names = [], []
    for i, item in enumerate(tools):
        where = f"tools[{i}]"
        if isinstance(item, str):
            if item not in registry:
                problems.append(
                    f"{where}: "
                    + _(
                        "no registered tool %(tool)s; define it here instead "
                        "({name, description, parameters, risk_class})"
                    )
                    % {"tool": _shown(item)}
                )
            names.append(item)
            continue
        if not isinstance(item, Mapping):
            problems.append(f"{where}: " + _("a registered tool's name, or a tool definition"))
            continue
        unknown = sorted(set(item) - set(INLINE_TOOL_KEYS))
        if unknown:
            problems.append(
                f"{where}: "
                + _("unknown keys %(keys)s") % {"keys": ", ".join(map(_shown, unknown))}
            )
        name = item.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            problems.append(f"{where}.name: " + _("1-120 letters, digits, _ . or -"))
            continue
        if name in registry:
            problems.append(
                f"{where}.name: "
                + _("%(name)s is a registered tool; give its name alone to use it")
                % {"name": repr(name)}
            )
        names.append(name)
        description = item.get("description", "")
        if not isinstance(description, str) or len(description) > 2000:
            problems.append(f"{where}.description: " + _("text of at most 2000 characters"))
        risk = item.get("risk_class", "read_only")
        if risk not in ("read_only", "reversible_write", "irreversible", "regulated"):
            problems.append(
                f"{where}.risk_class: "
                + _("one of read_only, reversible_write, irreversible, regulated, not %(value)s")
                % {"value": _shown(risk)}
            )
            continue
        try:
            Tool(
                name=name,
                description=description if isinstance(description, str) else "",
                schema=item.get("parameters", {"type": "object"}),
                risk_class=risk,
                func=len,  # a stand-in: only the schema is checked here
            )
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}.parameters: {_clip(str(exc))}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(
            "tools: " + _("each name once; twice: %(names)s") % {"names": ", ".join(duplicates)}
        )
    return problems


def problems_by_field(problems: Iterable[str]) -> dict[str, list[str]]:
    """{"budgets": ["budgets.max_turns: ...", ...], ...}: each problem under its top-level field,
    as DRF reports validation errors."""
    grouped: dict[str, list[str]] = {}
    for problem in problems:
        where = problem.split(":", 1)[0]
        field = where.split(".", 1)[0].split("[", 1)[0] or "detail"
        grouped.setdefault(field, []).append(problem)
    return grouped


# ---- the parts --------------------------------------------------------------------------------


def _goal_problems(goal: object) -> list[str]:
    if not isinstance(goal, str):
        return ["goal: " + _("must be text")]
    if not goal.strip():
        return ["goal: " + _("must not be empty")]
    if len(goal) > MAX_GOAL_CHARS:
        return ["goal: " + _("longer than %(count)s characters") % {"count": MAX_GOAL_CHARS}]
    return [f"goal: {problem}" for problem in _text_problems(goal)]


def _text_list_problems(field: str, value: object, *, required: bool = False) -> list[str]:
    if value is None and not required:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        return [f"{field}: " + _("must be a list of text")]
    shape = _json_problems(field, list(value), default=[])
    if shape:
        return shape
    return [
        f"{field}[{i}]: " + _("must not be empty")
        for i, item in enumerate(value)
        if not item.strip()
    ]


def _name_problems(field: str, value: object, known: tuple[str, ...], problems: list) -> bool:
    if isinstance(value, str) and value in known:
        return True
    shown = _shown(value)
    problems.append(
        f"{field}: "
        + _("unknown %(field)s %(value)s; choose one of %(known)s")
        % {"field": field, "value": shown, "known": ", ".join(known)}
    )
    return False


def _budget_problems(budgets: object) -> list[str]:
    if not isinstance(budgets, Mapping):
        return ["budgets: " + _('must be an object such as {"max_turns": 10}')]
    problems = []
    known = _INTEGER_BUDGETS + _NUMBER_BUDGETS
    for key, value in budgets.items():
        where = f"budgets.{_shown_key(key)}"
        if key in _INTEGER_BUDGETS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                shown = _shown(value)
                problems.append(
                    f"{where}: "
                    + _("must be a whole number of at least 1, not %(value)s") % {"value": shown}
                )
        elif key in _NUMBER_BUDGETS:
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value <= 0:
                problems.append(
                    f"{where}: "
                    + _("must be a number above 0, not %(value)s") % {"value": _shown(value)}
                )
        else:
            problems.append(
                f"{where}: " + _("unknown budget; known: %(known)s") % {"known": ", ".join(known)}
            )
    return problems


def _config_problems(actor: str, guardian: str, config: object) -> list[str]:
    if not isinstance(config, Mapping):
        return ["config: " + _("must be an object")]
    allowed = _ACTOR_CONFIG_KEYS[actor] | _GUARDIAN_CONFIG_KEYS[guardian] | _COMMON_CONFIG_KEYS
    problems = []
    for key, value in config.items():
        where = f"config.{_shown_key(key)}"
        if key == "review_loop" and value is None and actor != "coder_reviewer":
            continue  # the demo's scenario runs pass review_loop=None for a plain agent loop
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            problems.append(
                f"{where}: "
                + _(
                    "not a setting of actor %(actor)s or guardian %(guardian)s "
                    "(they read: %(known)s)"
                )
                % {"actor": repr(actor), "guardian": repr(guardian), "known": known}
            )
        elif key == "scenario":
            # Each problem names its place from "scenario" on: "scenario.name: ...".
            problems += [f"config.{_clip(problem)}" for problem in scenario_problems(value)]
        else:
            problems += [
                f"{where}{_path(error.absolute_path)}: {_clip(error.message)}"
                for error in _KEY_VALIDATORS[key].iter_errors(value)
            ]
    needs_scenario = [
        role for role, name in (("actor", actor), ("guardian", guardian)) if name == "scripted"
    ]
    if needs_scenario and "scenario" not in config:
        if len(needs_scenario) == 2:
            said = _("required by the scripted actor and guardian (the script it plays)")
        elif needs_scenario == ["actor"]:
            said = _("required by the scripted actor (the script it plays)")
        else:
            said = _("required by the scripted guardian (the script it plays)")
        problems.append("config.scenario: " + said)
    return problems


def _scripted_problems(actor: str, guardian: str, config: object) -> list[str]:
    """The scripted adapters play whatever they are given, including the guardian's answers
    and a "success": a demo and test tool, refused where GUARDIAN_ALLOW_SCRIPTED_ADAPTERS is off."""
    if settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS:
        return []
    problems = []
    if actor == "scripted":
        problems.append(
            "actor: "
            + _(
                "the scripted actor is turned off here (GUARDIAN_ALLOW_SCRIPTED_ADAPTERS=false): "
                "it plays a script"
            )
        )
    if guardian == "scripted":
        problems.append(
            "guardian: "
            + _(
                "the scripted guardian is turned off here "
                "(GUARDIAN_ALLOW_SCRIPTED_ADAPTERS=false): it plays a script"
            )
        )
    scripted_review = isinstance(config, Mapping) and config.get("review_loop") is not None
    if actor == "coder_reviewer" and scripted_review:
        problems.append(
            "config.review_loop: "
            + _(
                "the scripted coder and reviewer is turned off here "
                "(GUARDIAN_ALLOW_SCRIPTED_ADAPTERS=false): it plays a script"
            )
        )
    return problems


def _installation_problems(actor: str, guardian: str, config: object) -> list[str]:
    """What a model adapter needs that neither the run's config nor this installation's
    settings give: such a run would fail on its first turn, every time."""
    if not isinstance(config, Mapping):
        return []
    needs: list[tuple[str, str, str | None]] = []  # (field, setting, config key that may set it)
    if actor == "openai":
        needs.append(("config.actor_model", "OPENAI_ACTOR_MODEL", "actor_model"))
    if actor == "coder_reviewer" and config.get("review_loop") is None:
        needs.append(("config.coder_model", "OPENAI_CODER_MODEL", "coder_model"))
        needs.append(("config.reviewer_model", "OPENAI_REVIEWER_MODEL", "reviewer_model"))
    if guardian == "openai":
        needs.append(("guardian", "OPENAI_GUARDIAN_MODEL", None))
    if guardian == "http":
        needs.append(("guardian", "GUARDIAN_HTTP_URL", None))
    if guardian == "onnx":
        needs.append(("guardian", "GUARDIAN_ONNX_MODELS", None))
    problems = []
    for where, setting, key in needs:
        if (key and config.get(key)) or getattr(settings, setting, ""):
            continue
        if key:
            said = _(
                "the actor %(actor)s needs a model or URL here; set it in the run's config or "
                "in %(setting)s"
            ) % {"actor": repr(actor), "setting": setting}
        else:
            said = _(
                "the guardian %(guardian)s needs a model or URL here; %(setting)s is not set"
            ) % {"guardian": repr(guardian), "setting": setting}
        problems.append(f"{where}: {said}")
    return problems


# ---- JSON shape: depth, size and text the database can store ---------------------------------


def _json_problems(field: str, value: object, *, default: object) -> list[str]:
    """Depth, size and unstorable text anywhere in `value`, walked without recursion.

    PostgreSQL refuses a NUL character in text and jsonb, and a lone surrogate cannot be
    encoded as UTF-8 at all: both would fail the insert (a 500), so both are named here.
    """
    if value is None:
        value = default
    problems: list[str] = []
    size = 0
    stack: list[tuple[object, str, int]] = [(value, field, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return [f"{field}: " + _("nested deeper than %(count)s levels") % {"count": MAX_DEPTH}]
        if isinstance(item, str):
            size += len(item)
            problems += [f"{where}: {problem}" for problem in _text_problems(item)]
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str):
                    problems.append(f"{where}: " + _("keys must be text"))
                    continue
                size += len(key)
                child_where = f"{where}.{_shown_key(key)}"
                problems += [
                    f"{child_where}: " + _("the name %(problem)s") % {"problem": p}
                    for p in _text_problems(key)
                ]
                stack.append((child, child_where, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            problems.append(f"{where}: " + _("must be a finite number"))
        elif item is not None and not isinstance(item, bool | int | float):
            problems.append(
                f"{where}: " + _("must be JSON (text, number, true/false, null, list, object)")
            )
        size += 1
        if size > MAX_JSON_CHARS:
            return [
                f"{field}: " + _("larger than %(count)s KiB") % {"count": MAX_JSON_CHARS // 1024}
            ]
        if len(problems) >= 20:  # enough to fix the input; the rest would repeat itself
            break
    return sorted(set(problems))


def _text_problems(text: str) -> list[str]:
    problems = []
    if "\x00" in text:
        problems.append(_("contains a NUL character (\\u0000), which cannot be stored"))
    if any("\ud800" <= char <= "\udfff" for char in text):
        problems.append(_("contains a lone surrogate (\\ud800-\\udfff), which is not valid text"))
    return problems


def _shown(value: object) -> str:
    """A short, ASCII-only rendering of a bad value for a message."""
    return _clip(ascii(value), 60)


def _shown_key(key: object) -> str:
    text = str(key)
    clean = text.isprintable() and text.isascii() and len(text) <= 60 and "." not in text
    return text if clean else _shown(key)


def _path(parts: Iterable) -> str:
    return "".join(
        f"[{part}]" if isinstance(part, int) else f".{_shown_key(part)}" for part in parts
    )


def _clip(text: str, limit: int = 300) -> str:
    text = ascii(text)[1:-1] if not text.isascii() else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def storable_json(field: str):
    """A validator: `field`'s JSON within the depth and size bounds, with no text PostgreSQL
    cannot store (NUL, lone surrogates): either would be a 500 at the insert."""

    def check(value: object) -> None:
        problems = _json_problems(field, value, default={})
        if problems:
            raise serializers.ValidationError(problems)

    return check
