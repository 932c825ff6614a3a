"""What changed between two policy versions, in words, per condition and per setting."""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardian_core.policy_validation import LIMIT_DEFAULTS, hysteresis_of, limits_with_defaults

# Said the way the admins' pages say it; any other key reads as its name with spaces.
LIMIT_WORDS: Mapping[str, str] = {
    "drift_window": "drift window",
    "drift_required": "drift required",
    "stagnation_window": "stagnation window",
    "stagnation_required": "stagnation required",
    "max_replans": "max replans",
    "repeat_limit": "repeat limit",
    "max_turns": "turn cap",
    "max_tokens": "token cap",
    "max_cost": "cost cap",
    "max_wall_seconds": "wall-time cap (s)",
    "escalation_hours": "escalation deadline (h)",
}
THRESHOLD_WORDS: Mapping[str, str] = {"c_stop": "C_stop", "c_cont": "C_cont", "delta": "δ"}
# Fields that name or place a version rather than say how it guards: never a difference.
NOT_CONTENT = frozenset(
    {
        "id",
        "number",
        "is_active",
        "created_by",
        "created_by_id",
        "created_at",
        "copied_from",
        "copied_from_id",
    }
)
KNOWN = frozenset(
    {"label", "thresholds", "question_set", "question_set_version", "quorum", "judge", "limits"}
)


@dataclass(frozen=True)
class Change:
    """One difference: the setting it is in, a sentence, and the raw values either side."""

    field: str
    words: str
    old: Any
    new: Any

    @property
    def old_raw(self) -> str:
        return _raw(self.old)

    @property
    def new_raw(self) -> str:
        return _raw(self.new)


def version_diff(old: Any, new: Any) -> list[Change]:
    """Every difference from `old` to `new` (PolicyVersion or anything with its attributes);
    [] when they guard alike."""
    changes: list[Change] = []
    if (old.label or "") != (new.label or ""):
        changes.append(
            Change("label", f"label {_text(old.label)} → {_text(new.label)}", old.label, new.label)
        )
    changes += _thresholds_diff(old.thresholds or {}, new.thresholds or {})
    changes += _questions_diff(old, new)
    changes += _quorum_diff(old.quorum or {}, new.quorum or {})
    changes += _judge_diff(old.judge or {}, new.judge or {})
    changes += _limits_diff(getattr(old, "limits", None) or {}, getattr(new, "limits", None) or {})
    changes += _other_fields_diff(old, new)
    return changes


def _thresholds_diff(old: Mapping, new: Mapping) -> list[Change]:
    changes = []
    for condition in _union(old, new):
        before, after = old.get(condition), new.get(condition)
        if before == after:
            continue
        if before is None:
            words = f"{condition} added ({_threshold_summary(after)})"
        elif after is None:
            words = f"{condition} removed (was {_threshold_summary(before)})"
        else:
            changes += _condition_diff(condition, before, after)
            continue
        changes.append(Change(f"thresholds.{condition}", words, before, after))
    return changes


def _condition_diff(condition: str, before: Mapping, after: Mapping) -> list[Change]:
    changes = []
    costs = ("c_stop", "c_cont")
    if any(before.get(k) != after.get(k) for k in costs) or _t_star(before) != _t_star(after):
        words = (
            f"{condition} t* {_t_text(_t_star(before))} → {_t_text(_t_star(after))} ("
            + ", ".join(
                f"{THRESHOLD_WORDS[k]} {_number(before.get(k))} → {_number(after.get(k))}"
                for k in costs
            )
            + ")"
        )
        changes.append(
            Change(
                f"thresholds.{condition}",
                words,
                {k: before.get(k) for k in costs},
                {k: after.get(k) for k in costs},
            )
        )
    for key in _union(before, after):
        if key in (*costs, "t_star") or before.get(key) == after.get(key):
            continue
        name = THRESHOLD_WORDS.get(key, key.replace("_", " "))
        words = f"{condition} {name} {_number(before.get(key), 2)} → {_number(after.get(key), 2)}"
        changes.append(
            Change(f"thresholds.{condition}.{key}", words, before.get(key), after.get(key))
        )
    return changes


def _questions_diff(old: Any, new: Any) -> list[Change]:
    set_old, set_new = old.question_set_version, new.question_set_version
    which = (
        f"question set {set_old} → {set_new}"
        if set_old != set_new
        else f"question set {set_old} unchanged"
    )
    before, after = old.question_set or {}, new.question_set or {}
    changes = []
    for condition in _union(before, after):
        if before.get(condition) == after.get(condition):
            continue
        if condition not in before:
            words = f"{condition} question added ({which})"
        elif condition not in after:
            words = f"{condition} question removed ({which})"
        else:
            words = f"{condition} question reworded ({which})"
        changes.append(
            Change(f"question_set.{condition}", words, before.get(condition), after.get(condition))
        )
    if set_old != set_new and not changes:
        changes.append(Change("question_set_version", f"{which}, same wording", set_old, set_new))
    return changes


def _quorum_diff(old: Mapping, new: Mapping) -> list[Change]:
    changes = []
    if bool(old.get("regulated")) != bool(new.get("regulated")):
        words = "quorum on regulated calls: " + (
            "one approver → two approvers" if new.get("regulated") else "two approvers → one"
        )
        changes.append(
            Change("quorum.regulated", words, old.get("regulated"), new.get("regulated"))
        )
    tools_old, tools_new = old.get("tools") or [], new.get("tools") or []
    added = [t for t in tools_new if t not in tools_old]
    removed = [t for t in tools_old if t not in tools_new]
    if added or removed:
        parts = []
        if added:
            parts.append("two approvers now for " + ", ".join(added))
        if removed:
            parts.append("one approver again for " + ", ".join(removed))
        changes.append(Change("quorum.tools", "quorum: " + "; ".join(parts), tools_old, tools_new))
    for key in _union(old, new):
        if key not in ("regulated", "tools") and old.get(key) != new.get(key):
            words = (
                f"quorum {key.replace('_', ' ')} {_value(old.get(key))} → {_value(new.get(key))}"
            )
            changes.append(Change(f"quorum.{key}", words, old.get(key), new.get(key)))
    return changes


def _judge_diff(old: Mapping, new: Mapping) -> list[Change]:
    if old == new:
        return []
    if not old:
        return [Change("judge", f"judge added: {_judge_summary(new)}", old, new)]
    if not new:
        return [Change("judge", f"judge removed (was {_judge_summary(old)})", old, new)]
    return [
        Change(
            f"judge.{key}",
            f"judge {key.replace('_', ' ')} {_value(old.get(key))} → {_value(new.get(key))}",
            old.get(key),
            new.get(key),
        )
        for key in _union(old, new)
        if old.get(key) != new.get(key)
    ]


def _resolved_limits(limits: Mapping) -> dict:
    """The limits as a run is judged by them: each replanning condition's window and count
    resolved (its own, else the run-wide pair, which is then no setting of its own)."""
    resolved = {**limits_with_defaults(limits), **limits}
    resolved.pop("hysteresis_window", None)
    resolved.pop("hysteresis_required", None)
    for condition, (window, required) in hysteresis_of(limits).items():
        resolved[f"{condition}_window"], resolved[f"{condition}_required"] = window, required
    return resolved


def _limits_diff(old: Mapping, new: Mapping) -> list[Change]:
    # A key left out runs with its default, so {} and the defaults spelled out guard alike. A
    # cap or deadline left out reads "(default)": the run's own budget, or the setting.
    before, after = _resolved_limits(old), _resolved_limits(new)
    return [
        Change(
            f"limits.{key}",
            f"{LIMIT_WORDS.get(key, key.replace('_', ' '))} "
            f"{_limit_value(key, before.get(key))} → {_limit_value(key, after.get(key))}",
            before.get(key),
            after.get(key),
        )
        for key in (*LIMIT_DEFAULTS, *sorted((set(before) | set(after)) - set(LIMIT_DEFAULTS)))
        if before.get(key) != after.get(key)
    ]


def _limit_value(key: str, value: Any) -> str:
    if value is not None:
        return _value(value)
    if key == "escalation_hours":
        return "(the GUARDIAN_ESCALATION_HOURS setting)"
    return "(the run's own budget)"


def _other_fields_diff(old: Any, new: Any) -> list[Change]:
    # A field added to PolicyVersion later still shows, under its own name.
    meta = getattr(type(new), "_meta", None)
    if meta is None:
        return []
    changes = []
    for field in meta.concrete_fields:
        name = field.attname
        if name in NOT_CONTENT or field.name in KNOWN or name in KNOWN:
            continue
        before, after = getattr(old, name, None), getattr(new, name, None)
        if before != after:
            words = f"{field.name.replace('_', ' ')} {_value(before)} → {_value(after)}"
            changes.append(Change(field.name, words, before, after))
    return changes


def _union(old: Mapping, new: Mapping) -> list[str]:
    return [*old, *(key for key in new if key not in old)]


def _t_star(values: Mapping) -> float | None:
    c_stop, c_cont = values.get("c_stop"), values.get("c_cont")
    try:
        return c_stop / (c_stop + c_cont)
    except (TypeError, ZeroDivisionError):
        return values.get("t_star")


def _threshold_summary(values: Any) -> str:
    if not isinstance(values, Mapping):
        return _value(values)
    parts = [f"t* {_t_text(_t_star(values))}"]
    parts += [
        f"{THRESHOLD_WORDS.get(k, k)} {_number(v, 2 if k == 'delta' else 0)}"
        for k, v in values.items()
        if k != "t_star"
    ]
    return ", ".join(parts)


def _judge_summary(judge: Mapping) -> str:
    conditions = ", ".join(judge.get("conditions") or []) or "no condition"
    return f"{judge.get('model')} ({judge.get('adapter')}) on {conditions}, " + (
        f"{_number(judge.get('timeout_seconds', 10))} s"
    )


def _t_text(value: Any) -> str:
    """t* as the other pages show it: two places when they say it all ("0.10"), else three
    ("0.182")."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _value(value)
    two = f"{value:.2f}"
    return two if abs(float(two) - value) < 1e-9 else f"{value:.3f}"


def _number(value: Any, places: int = 0) -> str:
    """0.1 → "0.10" with places=2; up to four significant digits when the value has more;
    ints stay ints."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _value(value)
    if isinstance(value, float) and value.is_integer() and places == 0:
        value = int(value)
    if isinstance(value, int):
        return str(value)
    text = f"{value:.{places}f}"
    return text if float(text) == value else f"{value:.4g}"


def _text(value: Any) -> str:
    return f"“{value}”" if value not in (None, "") else "(none)"


def _value(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if value else "(none)"
    return str(value)


def _raw(value: Any) -> str:
    return "—" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
