"""What changed between two policy versions, in words, per condition and per setting. The words
are sentences kept as data (guardian_core/said.py): the compare page and the gate's report word
them in the reader's language."""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardian_core.policy_validation import LIMIT_DEFAULTS, hysteresis_of, limits_with_defaults
from guardian_core.said import figure, said

# Said the way the admins' pages say it; any other key reads as its name with spaces.
LIMIT_WORDS: Mapping[str, dict] = {
    "drift_window": said("drift window"),
    "drift_required": said("drift required"),
    "stagnation_window": said("stagnation window"),
    "stagnation_required": said("stagnation required"),
    "max_replans": said("max replans"),
    "repeat_limit": said("repeat limit"),
    "max_turns": said("turn cap"),
    "max_tokens": said("token cap"),
    "max_cost": said("cost cap"),
    "max_wall_seconds": said("wall-time cap (s)"),
    "escalation_hours": said("escalation deadline (h)"),
}
_CHANGED = "%(setting)s %(old)s → %(new)s"
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
    """One difference: the setting it is in (`field`, which code matches), a sentence (an entry
    of guardian_core/said.py), and the raw values either side."""

    field: str
    words: dict
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
        words = said("label %(old)s → %(new)s", old=_text(old.label), new=_text(new.label))
        changes.append(Change("label", words, old.label, new.label))
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
            words = said(
                "%(condition)s added (%(summary)s)",
                condition=condition,
                summary=_threshold_summary(after),
            )
        elif after is None:
            words = said(
                "%(condition)s removed (was %(summary)s)",
                condition=condition,
                summary=_threshold_summary(before),
            )
        else:
            changes += _condition_diff(condition, before, after)
            continue
        changes.append(Change(f"thresholds.{condition}", words, before, after))
    return changes


def _condition_diff(condition: str, before: Mapping, after: Mapping) -> list[Change]:
    changes = []
    costs = ("c_stop", "c_cont")
    if any(before.get(k) != after.get(k) for k in costs) or _t_star(before) != _t_star(after):
        words = said(
            "%(condition)s t* %(old)s → %(new)s (%(costs)s)",
            condition=condition,
            old=_t_text(_t_star(before)),
            new=_t_text(_t_star(after)),
            costs=[
                said(
                    _CHANGED,
                    setting=THRESHOLD_WORDS[k],
                    old=_number(before.get(k)),
                    new=_number(after.get(k)),
                )
                for k in costs
            ],
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
        words = said(
            "%(condition)s %(setting)s %(old)s → %(new)s",
            condition=condition,
            setting=name,
            old=_number(before.get(key), 2),
            new=_number(after.get(key), 2),
        )
        changes.append(
            Change(f"thresholds.{condition}.{key}", words, before.get(key), after.get(key))
        )
    return changes


def _questions_diff(old: Any, new: Any) -> list[Change]:
    set_old, set_new = old.question_set_version, new.question_set_version
    which = (
        said("question set %(old)s → %(new)s", old=set_old, new=set_new)
        if set_old != set_new
        else said("question set %(old)s unchanged", old=set_old)
    )
    before, after = old.question_set or {}, new.question_set or {}
    changes = []
    for condition in _union(before, after):
        if before.get(condition) == after.get(condition):
            continue
        if condition not in before:
            words = said(
                "%(condition)s question added (%(which)s)", condition=condition, which=which
            )
        elif condition not in after:
            words = said(
                "%(condition)s question removed (%(which)s)", condition=condition, which=which
            )
        else:
            words = said(
                "%(condition)s question reworded (%(which)s)", condition=condition, which=which
            )
        changes.append(
            Change(f"question_set.{condition}", words, before.get(condition), after.get(condition))
        )
    if set_old != set_new and not changes:
        words = said("%(which)s, same wording", which=which)
        changes.append(Change("question_set_version", words, set_old, set_new))
    return changes


def _quorum_diff(old: Mapping, new: Mapping) -> list[Change]:
    changes = []
    if bool(old.get("regulated")) != bool(new.get("regulated")):
        words = (
            said("quorum on regulated calls: one approver → two approvers")
            if new.get("regulated")
            else said("quorum on regulated calls: two approvers → one")
        )
        changes.append(
            Change("quorum.regulated", words, old.get("regulated"), new.get("regulated"))
        )
    tools_old, tools_new = old.get("tools") or [], new.get("tools") or []
    added = [t for t in tools_new if t not in tools_old]
    removed = [t for t in tools_old if t not in tools_new]
    if added or removed:
        tools_added, tools_removed = ", ".join(added), ", ".join(removed)
        if added and removed:
            words = said(
                "quorum: two approvers now for %(added)s; one approver again for %(removed)s",
                added=tools_added,
                removed=tools_removed,
            )
        elif added:
            words = said("quorum: two approvers now for %(added)s", added=tools_added)
        else:
            words = said("quorum: one approver again for %(removed)s", removed=tools_removed)
        changes.append(Change("quorum.tools", words, tools_old, tools_new))
    for key in _union(old, new):
        if key not in ("regulated", "tools") and old.get(key) != new.get(key):
            words = said(
                "quorum %(setting)s %(old)s → %(new)s",
                setting=key.replace("_", " "),
                old=_value(old.get(key)),
                new=_value(new.get(key)),
            )
            changes.append(Change(f"quorum.{key}", words, old.get(key), new.get(key)))
    return changes


def _judge_diff(old: Mapping, new: Mapping) -> list[Change]:
    if old == new:
        return []
    if not old:
        words = said("judge added: %(judge)s", judge=_judge_summary(new))
        return [Change("judge", words, old, new)]
    if not new:
        words = said("judge removed (was %(judge)s)", judge=_judge_summary(old))
        return [Change("judge", words, old, new)]
    return [
        Change(
            f"judge.{key}",
            said(
                "judge %(setting)s %(old)s → %(new)s",
                setting=key.replace("_", " "),
                old=_value(old.get(key)),
                new=_value(new.get(key)),
            ),
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
            said(
                _CHANGED,
                setting=LIMIT_WORDS.get(key, key.replace("_", " ")),
                old=_limit_value(key, before.get(key)),
                new=_limit_value(key, after.get(key)),
            ),
            before.get(key),
            after.get(key),
        )
        for key in (*LIMIT_DEFAULTS, *sorted((set(before) | set(after)) - set(LIMIT_DEFAULTS)))
        if before.get(key) != after.get(key)
    ]


def _limit_value(key: str, value: Any) -> str | dict:
    if value is not None:
        return _value(value)
    if key == "escalation_hours":
        return said("(the GUARDIAN_ESCALATION_HOURS setting)")
    return said("(the run's own budget)")


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
            words = said(
                _CHANGED,
                setting=field.name.replace("_", " "),
                old=_value(before),
                new=_value(after),
            )
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


def _threshold_summary(values: Any) -> str | dict | list:
    if not isinstance(values, Mapping):
        return _value(values)
    parts = [said("t* %(value)s", value=_t_text(_t_star(values)))]
    parts += [
        said(
            "%(setting)s %(value)s",
            setting=THRESHOLD_WORDS.get(k, k),
            value=_number(v, 2 if k == "delta" else 0),
        )
        for k, v in values.items()
        if k != "t_star"
    ]
    return parts


def _judge_summary(judge: Mapping) -> dict:
    conditions = ", ".join(judge.get("conditions") or [])
    seconds = _number(judge.get("timeout_seconds", 10))
    if not conditions:
        return said(
            "%(model)s (%(adapter)s) on no condition, %(seconds)s s",
            model=str(judge.get("model")),
            adapter=str(judge.get("adapter")),
            seconds=seconds,
        )
    return said(
        "%(model)s (%(adapter)s) on %(conditions)s, %(seconds)s s",
        model=str(judge.get("model")),
        adapter=str(judge.get("adapter")),
        conditions=conditions,
        seconds=seconds,
    )


def _t_text(value: Any) -> str | dict:
    """t* as the other pages show it: two places when they say it all ("0.10"), else three
    ("0.182")."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _value(value)
    two = f"{value:.2f}"
    return figure(value, 2 if abs(float(two) - value) < 1e-9 else 3)


def _number(value: Any, places: int = 0) -> str | dict:
    """0.1 → "0.10" with places=2; up to four significant digits when the value has more;
    ints stay ints."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _value(value)
    if isinstance(value, float) and value.is_integer() and places == 0:
        value = int(value)
    if isinstance(value, int):
        return str(value)
    text = f"{value:.{places}f}"
    return figure(value, places) if float(text) == value else figure(value, None)


def _text(value: Any) -> str | dict:
    return said("“%(text)s”", text=str(value)) if value not in (None, "") else said("(none)")


def _value(value: Any) -> str | dict:
    if value is None:
        return said("(none)")
    if isinstance(value, bool):
        return said("yes") if value else said("no")
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or said("(none)")
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if value else said("(none)")
    return str(value)


def _raw(value: Any) -> str:
    return "—" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
