"""What makes a policy version valid: every problem of its thresholds and question set, at once.

A version is what every run pinned to it is judged by, so a bad one must be refused when it is
saved or activated, not discovered by the first run that maps it onto the engine. The rules
mirror `guardian_core.engine.thresholds.Threshold` (and are checked against it in the end), so
a version that passes here always maps onto the engine.

Plain Python on purpose: `PolicyVersion.clean()`, the services, the admin and `runs/mapping.py`
all call it, and none of them needs a database to ask whether some JSON is a valid version.
"""

import math
from collections.abc import Mapping

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS
from guardian_core.engine.conditions import Condition
from guardian_core.engine.thresholds import Threshold

CONDITIONS: tuple[str, ...] = tuple(condition.value for condition in Condition)
COST_KEYS = ("c_stop", "c_cont")
THRESHOLD_KEYS = frozenset({"c_stop", "c_cont", "delta", "t_star"})
# t* is stored rounded to 6 places (Threshold.as_dict); a submitted t* may differ by that much.
T_STAR_TOLERANCE = 1e-6
QUESTION_SET_VERSION_MAX_LENGTH = 40  # PolicyVersion.question_set_version's max_length
QUESTION_MAX_LENGTH = 2000


def policy_version_problems(
    *,
    thresholds: object,
    question_set: object,
    question_set_version: object,
    quorum: object = None,
    judge: object = None,
    limits: object = None,
) -> list[str]:
    """Every problem of a policy version's content, one "field.path: what is wrong" each; []
    when the version is valid. Never raises, whatever JSON it is given. A missing quorum
    (None) is the empty one: every held call needs one approver; so is a missing judge: no
    judge, every uncertain answer goes to a person."""
    return [
        *_thresholds_problems(thresholds),
        *_question_set_problems(question_set, question_set_version),
        *_question_set_version_problems(question_set_version),
        *_quorum_problems({} if quorum is None else quorum),
        *judge_problems({} if judge is None else judge),
        *limits_problems({} if limits is None else limits),
    ]


# What a version without a key runs with: the engine Policy's own defaults, so a version stored
# before limits were part of it replays exactly as it ran. None for a run cap: the run's own
# budget, else the engine's (no limit but the turn cap); None for the escalation deadline: the
# GUARDIAN_ESCALATION_HOURS setting, as before deadlines were part of a version.
LIMIT_DEFAULTS: Mapping[str, int | None] = {
    "hysteresis_window": 3,
    "hysteresis_required": 2,
    # None: the run-wide hysteresis_window / hysteresis_required above.
    "drift_window": None,
    "drift_required": None,
    "stagnation_window": None,
    "stagnation_required": None,
    "max_replans": 2,
    "repeat_limit": 3,
    "max_turns": None,
    "max_tokens": None,
    "max_cost": None,
    "max_wall_seconds": None,
    "escalation_hours": None,
}
# The limits the engine Policy takes as its own fields (runs/mapping.py passes them through).
POLICY_LIMIT_KEYS = ("hysteresis_window", "hysteresis_required", "max_replans", "repeat_limit")
# Each replanning condition's own window and count (the engine's Hysteresis), over the run-wide
# pair: the editor sets these; a version stored before them falls back to the run-wide pair.
HYSTERESIS_KEYS: Mapping[str, tuple[str, str]] = {
    "drift": ("drift_window", "drift_required"),
    "stagnation": ("stagnation_window", "stagnation_required"),
}
# The caps a run that states no budget of its own is given at its start (runs/validation.py
# names and checks a run's budgets the same way).
RUN_CAP_KEYS = ("max_turns", "max_tokens", "max_cost", "max_wall_seconds")
# Limits that may be fractions (money and seconds); the others are whole numbers.
FRACTIONAL_LIMITS = frozenset({"max_cost", "max_wall_seconds"})
# One line each, beside the field on the new-version form and on the version page.
LIMIT_HELP: Mapping[str, str] = {
    "hysteresis_window": gettext_lazy(
        "Drift and stagnation count over this many latest turns (1-50)."
    ),
    "hysteresis_required": gettext_lazy(
        "They replan only when they fired on this many of those turns."
    ),
    "drift_window": gettext_lazy(
        "Drift counts its fires over this many latest turns, this one included (1-50)."
    ),
    "drift_required": gettext_lazy("Drift replans only when it fired on this many of those turns."),
    "stagnation_window": gettext_lazy(
        "Stagnation counts its fires over this many latest turns (1-50)."
    ),
    "stagnation_required": gettext_lazy(
        "Stagnation replans only when it fired on this many of those turns."
    ),
    "max_replans": gettext_lazy(
        "After this many replans, stagnation or a repeat stops the run (0-50)."
    ),
    "repeat_limit": gettext_lazy("The same call this many turns in a row is a loop (2-50)."),
    "max_turns": gettext_lazy(
        "A run that states no turn cap stops after this many turns (1-10000)."
    ),
    "max_tokens": gettext_lazy(
        "A run that states no token budget stops past this many model tokens."
    ),
    "max_cost": gettext_lazy(
        "A run that states no cost budget stops past this cost, in the models' unit."
    ),
    "max_wall_seconds": gettext_lazy(
        "A run that states no wall-time budget stops past this many seconds."
    ),
    "escalation_hours": gettext_lazy(
        "An unanswered escalation resolves to the safe side after this (1-720 h)."
    ),
}
LIMIT_RANGES: Mapping[str, tuple[float, float]] = {
    "hysteresis_window": (1, 50),
    "hysteresis_required": (1, 50),
    "drift_window": (1, 50),
    "drift_required": (1, 50),
    "stagnation_window": (1, 50),
    "stagnation_required": (1, 50),
    "max_replans": (0, 50),
    "repeat_limit": (2, 50),
    "max_turns": (1, 10_000),
    "max_tokens": (1, 1_000_000_000),
    # Fractions: above the low bound (a cap of 0 would stop every run before its first turn).
    "max_cost": (0, 1_000_000),
    "max_wall_seconds": (0, 30 * 24 * 3600),
    "escalation_hours": (1, 720),
}


def limits_with_defaults(limits: Mapping) -> dict[str, int]:
    """The engine Policy's limits a run is judged by: the stored ones, the default for each key
    left out (the run caps and the deadline are applied elsewhere: run_caps, escalation_hours)."""
    return {key: limits.get(key, LIMIT_DEFAULTS[key]) for key in POLICY_LIMIT_KEYS}


def hysteresis_of(limits: Mapping) -> dict[str, tuple[int, int]]:
    """Per replanning condition, the (window, required) a run is judged by: its own keys, else
    the run-wide pair, else the engine's defaults."""
    run_wide = limits_with_defaults(limits)
    return {
        condition: (
            limits.get(window) or run_wide["hysteresis_window"],
            limits.get(required) or run_wide["hysteresis_required"],
        )
        for condition, (window, required) in HYSTERESIS_KEYS.items()
    }


def run_caps(limits: Mapping) -> dict[str, int | float]:
    """The run caps a version states, only those: a run starting without its own budget for a
    key takes this one; a key the version leaves out leaves the run as it always was."""
    return {key: limits[key] for key in RUN_CAP_KEYS if key in limits}


def escalation_hours(limits: Mapping) -> int:
    """Hours an escalation opened under a version stays open: its own, else the setting."""
    if limits.get("escalation_hours") is not None:
        return limits["escalation_hours"]
    from django.conf import settings  # read at call time: tests and operators may change it

    return settings.GUARDIAN_ESCALATION_HOURS


def limits_problems(limits: object) -> list[str]:
    """Every problem of a version's limits, one "limits.key: what is wrong" each."""
    if not isinstance(limits, Mapping):
        return ["limits: " + _("must be an object, got %(kind)s") % {"kind": _kind(limits)}]
    problems = [
        (
            f"limits.{key}: "
            + _("unknown key (allowed: %(allowed)s)") % {"allowed": ", ".join(LIMIT_DEFAULTS)}
        )[:300]
        for key in limits
        if key not in LIMIT_DEFAULTS
    ]
    for key, (low, high) in LIMIT_RANGES.items():
        if key not in limits:
            continue
        value = limits[key]
        if key in FRACTIONAL_LIMITS:
            if not _is_number(value) or not low < value <= high:
                problems.append(
                    (
                        f"limits.{key}: "
                        + _("must be a number above %(low)s and at most %(high)s, got %(value)s")
                        % {"low": f"{low:g}", "high": f"{high:g}", "value": repr(value)}
                    )[:300]
                )
        elif isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            problems.append(
                (
                    f"limits.{key}: "
                    + _("must be a whole number in [%(low)s, %(high)s], got %(value)s")
                    % {"low": low, "high": high, "value": repr(value)}
                )[:300]
            )

    # Each pair is checked whenever both of its values are sound on their own, so it is named
    # beside any other bad value (the run-wide pair, then each condition's as it resolves).
    def sound(*keys: str) -> bool:
        return not any(p.startswith(tuple(f"limits.{k}:" for k in keys)) for p in problems)

    run_wide = limits_with_defaults(limits)
    run_wide_sound = sound("hysteresis_window", "hysteresis_required")
    if run_wide_sound and run_wide["hysteresis_required"] > run_wide["hysteresis_window"]:
        problems.append(
            "limits.hysteresis_required: "
            + _("must be at most hysteresis_window (%(window)s), got %(required)s")
            % {
                "window": run_wide["hysteresis_window"],
                "required": run_wide["hysteresis_required"],
            }
        )
    elif run_wide_sound:
        for condition, (window, required) in hysteresis_of(limits).items():
            if sound(*HYSTERESIS_KEYS[condition]) and required > window:
                problems.append(
                    f"limits.{condition}_required: "
                    + _(
                        "must be at most %(condition)s's window (%(window)s turns), "
                        "got %(required)s"
                    )
                    % {"condition": condition, "window": window, "required": required}
                )
    return problems


def reworded_conditions(
    *, question_set: object, question_set_version: object, source: object
) -> list[str]:
    """The conditions whose question's text differs from `source`'s (the version this one is
    copied from: anything with question_set and question_set_version) while the question-set
    version stays the same; [] when the set is renamed or nothing is reworded. A reworded
    question is a new question: the decision log names questions by their set's version only,
    so the same name on two wordings would make two different questions look the same."""
    if source is None or not isinstance(question_set, Mapping):
        return []
    if question_set_version != source.question_set_version:
        return []
    before = source.question_set or {}
    return [
        name
        for name in CONDITIONS
        # An emptied question is a missing one, refused as such, not a rewording too.
        if name in question_set
        and name in before
        and str(question_set[name] or "").strip()
        and question_set[name] != before[name]
    ]


def reworded_problems(
    *, question_set: object, question_set_version: object, source: object
) -> list[str]:
    """One "question_set.<condition>: …" problem per reworded question (reworded_conditions)."""
    return [
        f"question_set.{name}: "
        + _(
            "reworded from v%(number)s's question while question_set_version stays "
            "%(version)s; a reworded question needs a new question-set version"
        )
        % {"number": source.number, "version": repr(question_set_version)}
        for name in reworded_conditions(
            question_set=question_set, question_set_version=question_set_version, source=source
        )
    ]


def thresholds_with_t_star(thresholds: Mapping[str, Mapping]) -> dict[str, dict]:
    """The thresholds as they are stored: t* computed from the costs for every condition.

    t* is derived, never typed: whatever t* was submitted (it was checked to agree with the
    costs), the stored one is computed here, so the row can never carry a t* that disagrees
    with its own C_stop and C_cont. Call only on thresholds without problems.
    """
    stored = {}
    for name, values in thresholds.items():
        threshold = Threshold(
            c_stop=values["c_stop"], c_cont=values["c_cont"], delta=values["delta"]
        )
        stored[name] = threshold.as_dict()
    return stored


def _thresholds_problems(thresholds: object) -> list[str]:
    if not isinstance(thresholds, Mapping):
        got = _kind(thresholds)
        return [
            "thresholds: "
            + _("must be an object with one entry per condition, got %(kind)s") % {"kind": got}
        ]
    problems = [
        f"thresholds.{name}: "
        + _("unknown condition (known: %(known)s)") % {"known": ", ".join(CONDITIONS)}
        for name in thresholds
        if name not in CONDITIONS
    ]
    for name in CONDITIONS:
        if name not in thresholds:
            problems.append(f"thresholds.{name}: " + _("missing"))
        else:
            problems.extend(_threshold_problems(f"thresholds.{name}", thresholds[name]))
    return problems


def _threshold_problems(path: str, values: object) -> list[str]:
    if not isinstance(values, Mapping):
        return [
            f"{path}: "
            + _("must be an object with c_stop, c_cont and delta, got %(kind)s")
            % {"kind": _kind(values)}
        ]
    problems = [
        f"{path}.{key}: " + _("unknown key (allowed: c_stop, c_cont, delta, t_star)")
        for key in values
        if key not in THRESHOLD_KEYS
    ]
    for key in COST_KEYS:
        if key not in values:
            problems.append(f"{path}.{key}: " + _("missing"))
        elif not _is_number(values[key]) or values[key] <= 0:
            problems.append(
                (
                    f"{path}.{key}: "
                    + _("must be a number > 0, got %(value)s") % {"value": repr(values[key])}
                )[:300]
            )
    if "delta" not in values:
        problems.append(f"{path}.delta: " + _("missing"))
    elif not _is_number(delta := values["delta"]) or not 0 <= delta < 0.5:
        problems.append(
            (
                f"{path}.delta: "
                + _("must be a number in [0, 0.5), got %(value)s") % {"value": repr(delta)}
            )[:300]
        )
    if problems:
        return problems

    c_stop, c_cont, delta = values["c_stop"], values["c_cont"], values["delta"]
    t_star = c_stop / (c_stop + c_cont)
    if "t_star" in values:
        # Derived, so optional; a t* that is given must agree with the costs, because a reader
        # of the stored row (or of the decision log) takes it at its word.
        submitted = values["t_star"]
        if not _is_number(submitted) or abs(submitted - t_star) > T_STAR_TOLERANCE:
            problems.append(
                (
                    f"{path}.t_star: "
                    + _(
                        "must equal c_stop / (c_stop + c_cont) = %(t_star)s (it is derived from "
                        "the costs; leave it out), got %(value)s"
                    )
                    % {"t_star": f"{t_star:.6g}", "value": repr(submitted)}
                )[:300]
            )
    # The engine accepts a band that leaves (0, 1), but such a condition can never clear (or
    # never fire): every turn would escalate on it, or it would be switched off silently.
    if not (t_star - delta > 0 and t_star + delta < 1):
        problems.append(
            f"{path}.delta: "
            + _(
                "the uncertain band t* ± δ = [%(low)s, %(high)s] must lie inside (0, 1); "
                "make δ smaller or the costs closer"
            )
            % {"low": f"{t_star - delta:.6g}", "high": f"{t_star + delta:.6g}"}
        )
    if not problems:
        try:  # the engine's own word, so these rules can never drift from what it accepts
            Threshold(c_stop=c_stop, c_cont=c_cont, delta=delta)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
    return problems


def _question_set_problems(question_set: object, question_set_version: object) -> list[str]:
    if not isinstance(question_set, Mapping):
        return [
            "question_set: "
            + _("must be an object with one question per condition, got %(kind)s")
            % {"kind": _kind(question_set)}
        ]
    problems = [
        f"question_set.{name}: "
        + _("unknown condition (known: %(known)s)") % {"known": ", ".join(CONDITIONS)}
        for name in question_set
        if name not in CONDITIONS
    ]
    for name in CONDITIONS:
        path = f"question_set.{name}"
        text = question_set.get(name)
        if name not in question_set:
            problems.append(f"{path}: " + _("missing"))
        elif not isinstance(text, str) or not text.strip():
            problems.append(f"{path}: " + _("must be non-empty text"))
        elif len(text) > QUESTION_MAX_LENGTH:
            problems.append(
                f"{path}: "
                + _("must be at most %(limit)s characters") % {"limit": QUESTION_MAX_LENGTH}
            )
        elif not _storable(text):
            # PostgreSQL's jsonb refuses NUL and a lone surrogate cannot be encoded: either
            # would turn the save into a database error instead of a message.
            problems.append(
                f"{path}: " + _("must not contain NUL or unpaired surrogate characters")
            )
    # The guardians refuse custom wording under the built-in version (two different question
    # sets would look the same in the log); refuse it here rather than in every run.
    if (
        question_set_version == DEFAULT_QUESTION_SET_VERSION
        and not problems
        and dict(question_set) != dict(DEFAULT_QUESTIONS)
    ):
        problems.append(
            "question_set_version: "
            + _(
                "%(version)s names the built-in questions; custom wording needs a version "
                "of its own"
            )
            % {"version": repr(DEFAULT_QUESTION_SET_VERSION)}
        )
    return problems


def _question_set_version_problems(version: object) -> list[str]:
    if not isinstance(version, str) or not version.strip():
        return ["question_set_version: " + _("must be non-empty text")]
    if len(version) > QUESTION_SET_VERSION_MAX_LENGTH:
        limit = QUESTION_SET_VERSION_MAX_LENGTH
        return [
            "question_set_version: " + _("must be at most %(limit)s characters") % {"limit": limit}
        ]
    if version != version.strip() or not _storable(version):
        return ["question_set_version: " + _("must not start or end with spaces or contain NUL")]
    return []


QUORUM_KEYS = ("regulated", "tools")
TOOL_NAME_MAX_LENGTH = 120  # Approval.tool's and ToolCall.tool's max_length


def _quorum_problems(quorum: object) -> list[str]:
    """{"regulated": true} asks two distinct approvers for every regulated held call,
    {"tools": ["issue_refund"]} for every held call of the tools named; {} for none."""
    if not isinstance(quorum, Mapping):
        return [
            "quorum: "
            + _('must be an object such as {"regulated": true}, got %(kind)s')
            % {"kind": _kind(quorum)}
        ]
    problems = [
        (
            f"quorum.{key}: "
            + _("unknown key (allowed: %(allowed)s)") % {"allowed": ", ".join(QUORUM_KEYS)}
        )[:300]
        for key in quorum
        if key not in QUORUM_KEYS
    ]
    if "regulated" in quorum and not isinstance(quorum["regulated"], bool):
        problems.append(
            (
                "quorum.regulated: "
                + _("must be true or false, got %(value)s") % {"value": repr(quorum["regulated"])}
            )[:300]
        )
    if "tools" in quorum:
        tools = quorum["tools"]
        if not isinstance(tools, list):
            problems.append(
                "quorum.tools: "
                + _("must be a list of tool names, got %(kind)s") % {"kind": _kind(tools)}
            )
        else:
            for i, name in enumerate(tools):
                if not isinstance(name, str) or not name.strip() or not _storable(name):
                    problems.append(
                        (
                            f"quorum.tools[{i}]: "
                            + _("must be a tool name, got %(value)s") % {"value": repr(name)}
                        )[:300]
                    )
                elif len(name) > TOOL_NAME_MAX_LENGTH:
                    problems.append(
                        f"quorum.tools[{i}]: "
                        + _("must be at most %(limit)s characters")
                        % {"limit": TOOL_NAME_MAX_LENGTH}
                    )
            named = [name for name in tools if isinstance(name, str)]
            if len(set(named)) != len(named):
                problems.append("quorum.tools: " + _("names a tool more than once"))
    return problems


JUDGE_KEYS = ("adapter", "model", "conditions", "timeout_seconds")
# Adapters with a judge(projection, condition) method (runs/ports.py builds them).
JUDGE_ADAPTERS = ("openai",)
JUDGE_MODEL_MAX_LENGTH = 120  # Decision.guardian_model_version's max_length
# One rule for the form and the API: under a tenth of a second no server answers, so such a
# judge would send every case to a person while looking configured.
JUDGE_TIMEOUT_MIN_SECONDS = 0.1
JUDGE_TIMEOUT_MAX_SECONDS = 120
JUDGE_TIMEOUT_DEFAULT_SECONDS = 10.0


def judge_problems(judge: object) -> list[str]:
    """{} for no judge, or {"adapter": "openai", "model": NAME, "conditions": [...],
    "timeout_seconds": N (optional)}: every problem, each under its own path."""
    if not isinstance(judge, Mapping):
        return [
            "judge: "
            + _('must be an object such as {"adapter": "openai", …}, got %(kind)s')
            % {"kind": _kind(judge)}
        ]
    if not judge:
        return []
    problems = [
        (
            f"judge.{key}: "
            + _("unknown key (allowed: %(allowed)s)") % {"allowed": ", ".join(JUDGE_KEYS)}
        )[:300]
        for key in judge
        if key not in JUDGE_KEYS
    ]
    adapter = judge.get("adapter")
    if "adapter" not in judge:
        problems.append(
            "judge.adapter: "
            + _("missing (one of %(allowed)s)") % {"allowed": ", ".join(JUDGE_ADAPTERS)}
        )
    elif adapter not in JUDGE_ADAPTERS:
        problems.append(
            (
                "judge.adapter: "
                + _("must be one of %(allowed)s, got %(value)s")
                % {"allowed": ", ".join(JUDGE_ADAPTERS), "value": repr(adapter)}
            )[:300]
        )
    model = judge.get("model")
    if "model" not in judge:
        problems.append("judge.model: " + _("missing (the pinned model name the server reports)"))
    elif isinstance(model, str) and not model.strip():
        # Usually conditions ticked and the model left empty: say what to do, both ways out.
        problems.append(
            "judge.model: "
            + _(
                "name the model that judges (the pinned name your server reports), "
                "or untick every condition (no judge settings at all) for no judge"
            )
        )
    elif not isinstance(model, str) or not _storable(model):
        problems.append(
            ("judge.model: " + _("must be a model name, got %(value)s") % {"value": repr(model)})[
                :300
            ]
        )
    elif len(model) > JUDGE_MODEL_MAX_LENGTH or model != model.strip():
        problems.append(
            "judge.model: "
            + _("must be at most %(limit)s characters, without spaces around it")
            % {"limit": JUDGE_MODEL_MAX_LENGTH}
        )
    problems.extend(_judge_conditions_problems(judge.get("conditions"), "conditions" in judge))
    if "timeout_seconds" in judge:
        timeout = judge["timeout_seconds"]
        low, high = JUDGE_TIMEOUT_MIN_SECONDS, JUDGE_TIMEOUT_MAX_SECONDS
        if not _is_number(timeout) or not low <= timeout <= high:
            problems.append(
                (
                    "judge.timeout_seconds: "
                    + _("must be a number of seconds from %(low)s to %(high)s, got %(value)s")
                    % {"low": f"{low:g}", "high": f"{high:g}", "value": repr(timeout)}
                )[:300]
            )
    return problems


def _judge_conditions_problems(conditions: object, given: bool) -> list[str]:
    # Risk is never judged: an irreversible or regulated call always goes to a person.
    judgeable = [c for c in CONDITIONS if c != "risk"]
    if not given:
        return [
            "judge.conditions: "
            + _("missing (a list of: %(allowed)s)") % {"allowed": ", ".join(judgeable)}
        ]
    if not isinstance(conditions, list) or not conditions:
        return [
            (
                "judge.conditions: "
                + _("must be a non-empty list of: %(allowed)s, got %(value)s")
                % {"allowed": ", ".join(judgeable), "value": repr(conditions)}
            )[:300]
        ]
    problems = []
    for i, name in enumerate(conditions):
        if name == "risk":
            problems.append(
                f"judge.conditions[{i}]: "
                + _("risk is never judged: irreversible and regulated calls always go to a person")
            )
        elif name not in judgeable:
            problems.append(
                (
                    f"judge.conditions[{i}]: "
                    + _("unknown condition %(name)s (known: %(known)s)")
                    % {"name": repr(name), "known": ", ".join(judgeable)}
                )[:300]
            )
    named = [name for name in conditions if isinstance(name, str)]
    if len(set(named)) != len(named):
        problems.append("judge.conditions: " + _("names a condition more than once"))
    return problems


def _is_number(value: object) -> bool:
    # bool is an int in Python, and NaN or infinity are not costs (nor valid JSON).
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def registered_model_names() -> set[str]:
    """The model names this deployment knows: listed for judges, priced, or configured."""
    configured = (
        settings.OPENAI_GUARDIAN_MODEL,
        settings.OPENAI_ACTOR_MODEL,
        settings.OPENAI_CODER_MODEL,
        settings.OPENAI_REVIEWER_MODEL,
    )
    names = {*settings.GUARDIAN_JUDGE_MODELS, *settings.GUARDIAN_MODEL_PRICES, *configured}
    return {name for name in names if isinstance(name, str) and name}
