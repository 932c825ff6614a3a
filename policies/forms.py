"""The policy version editor's form: thresholds from stated costs, the questions, limits,
quorum and judge."""

from django import forms
from django.utils.formats import number_format
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from guardian_core.engine.thresholds import Budgets, Threshold
from guardian_core.models import PolicyVersion
from guardian_core.policy_validation import (
    CONDITIONS,
    FRACTIONAL_LIMITS,
    JUDGE_TIMEOUT_MAX_SECONDS,
    JUDGE_TIMEOUT_MIN_SECONDS,
    LIMIT_DEFAULTS,
    LIMIT_HELP,
    LIMIT_RANGES,
    escalation_hours,
    hysteresis_of,
    limits_with_defaults,
    policy_version_problems,
    reworded_conditions,
    reworded_problems,
)
from policies.services import policy_version_unregistered_problems

THRESHOLD_PARTS = ("c_stop", "c_cont", "delta")


COLUMN_NAMES = {"c_stop": "C_stop", "c_cont": "C_cont", "delta": "δ"}


LIMIT_LABELS = {
    "drift_window": gettext_lazy("Drift: hysteresis window (turns)"),
    "drift_required": gettext_lazy("Drift: turns that must fire"),
    "stagnation_window": gettext_lazy("Stagnation: hysteresis window (turns)"),
    "stagnation_required": gettext_lazy("Stagnation: turns that must fire"),
    "max_replans": gettext_lazy("Replans before a stop"),
    "repeat_limit": gettext_lazy("Repeat limit (same call, turns in a row)"),
    "max_turns": gettext_lazy("Run cap: turns"),
    "max_tokens": gettext_lazy("Run cap: tokens"),
    "max_cost": gettext_lazy("Run cap: cost"),
    "max_wall_seconds": gettext_lazy("Run cap: wall time (seconds)"),
    "escalation_hours": gettext_lazy("Escalation deadline (hours)"),
}


# The limits the editor sets. The run-wide hysteresis pair is not among them: each replanning
# condition has its own window and count, and the pair is only what a version stored before
# those falls back to (its copy spells the resolved values out per condition).
FORM_LIMIT_KEYS = tuple(LIMIT_LABELS)


# Query parameters the new-version page never takes as a field's value: `from` picks the version
# copied, and the version copied is the one the page says, never one a link names.
NOT_PREFILLED = frozenset({"copied_from"})


def limit_field(key: str) -> str:
    return f"limit_{key}"


def threshold_field(condition: str, part: str) -> str:
    return f"{condition}_{part}"


def question_field(condition: str) -> str:
    return f"question_{condition}"


class PolicyVersionForm(forms.Form):
    """A new policy version, prefilled from an earlier one. t* is never typed: it is derived
    from the two costs (see `derived_thresholds`), as the service stores it."""

    label = forms.CharField(max_length=120, required=False, label=gettext_lazy("Label"))
    question_set_version = forms.CharField(
        max_length=40,
        label=gettext_lazy("Question set version"),
        help_text=gettext_lazy(
            "Name the wording of the questions. Changed wording needs a new name."
        ),
    )
    quorum_regulated = forms.BooleanField(
        required=False, label=gettext_lazy("Two distinct approvers for every held regulated call")
    )
    quorum_tools = forms.CharField(
        required=False,
        label=gettext_lazy("Two distinct approvers for every held call of these tools"),
        help_text=gettext_lazy("Tool names, one per line or separated by commas."),
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    judge_model = forms.CharField(
        required=False,
        max_length=120,
        label=gettext_lazy("Second-tier judge: model"),
        help_text=gettext_lazy(
            "A model on the OpenAI-compatible server, pinned by the exact name it reports. "
            "Empty: no judge, every uncertain answer goes to a person."
        ),
    )
    judge_conditions = forms.MultipleChoiceField(
        required=False,
        choices=[(c, c) for c in CONDITIONS if c != "risk"],
        widget=forms.CheckboxSelectMultiple,
        label=gettext_lazy("Second-tier judge: conditions it may settle"),
        help_text=gettext_lazy(
            "Risk is never judged: irreversible and regulated calls go to a person."
        ),
    )
    judge_timeout_seconds = forms.FloatField(
        required=False,
        min_value=JUDGE_TIMEOUT_MIN_SECONDS,
        max_value=JUDGE_TIMEOUT_MAX_SECONDS,
        label=gettext_lazy("Second-tier judge: seconds it may take"),
        help_text=gettext_lazy(
            "An answer after this is no answer: the case goes to a person. Default 10."
        ),
    )
    # The version being edited (the page's ?from=, else the active one): kept across the POST
    # so the version stores where it came from even if another was activated meanwhile.
    copied_from = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for condition in CONDITIONS:
            for part, label, low in (
                ("c_stop", _("C_stop (cost of a false stop)"), None),
                ("c_cont", _("C_cont (cost of a false continue)"), None),
                ("delta", _("δ (half-width of the uncertain band)"), 0.0),
            ):
                self.fields[threshold_field(condition, part)] = forms.FloatField(
                    # Translators: a condition's name, then what its field holds.
                    label=_("%(condition)s: %(part)s") % {"condition": condition, "part": label},
                    min_value=low,
                    widget=forms.NumberInput(attrs={"step": "any", "inputmode": "decimal"}),
                )
            self.fields[question_field(condition)] = forms.CharField(
                label=_("%(condition)s: question") % {"condition": condition},
                max_length=2000,
                widget=forms.Textarea(attrs={"rows": 2}),
            )
        for key in FORM_LIMIT_KEYS:
            low, high = LIMIT_RANGES[key]
            # Bounds are the service's (policy_validation), so its message names a bad value.
            fractional = key in FRACTIONAL_LIMITS
            field_class = forms.FloatField if fractional else forms.IntegerField
            attrs = {"min": low, "max": high, "step": "any" if fractional else 1}
            self.fields[limit_field(key)] = field_class(
                required=False,
                label=LIMIT_LABELS[key],
                help_text=_("%(help)s Empty: %(default)s.")
                % {"help": LIMIT_HELP[key], "default": _default_words(key)},
                widget=forms.NumberInput(attrs=attrs),
            )

    def limit_fields(self) -> list:
        return [self[limit_field(key)] for key in FORM_LIMIT_KEYS]

    def threshold_rows(self) -> list[dict]:
        """Per condition, its C_stop, C_cont and δ fields with their column's short name (a
        phone shows it above each input), for the costs table."""
        return [
            {
                "condition": c,
                "cells": [
                    {"short": COLUMN_NAMES[part], "field": self[threshold_field(c, part)]}
                    for part in THRESHOLD_PARTS
                ],
            }
            for c in CONDITIONS
        ]

    def question_fields(self) -> list:
        return [self[question_field(condition)] for condition in CONDITIONS]

    @classmethod
    def initial_from(cls, version: PolicyVersion | None) -> dict:
        """Every field as `version` has it, so a new version starts from the one in force."""
        if version is None:
            return {}
        initial = {
            "label": "",
            "copied_from": version.pk,
            "question_set_version": version.question_set_version,
            "quorum_regulated": bool(version.quorum.get("regulated")),
            "quorum_tools": "\n".join(version.quorum.get("tools", [])),
            "judge_model": version.judge.get("model", ""),
            "judge_conditions": list(version.judge.get("conditions", [])),
            "judge_timeout_seconds": version.judge.get("timeout_seconds"),
        }
        stored = version.limits or {}
        # The engine's limits spelled out (each condition's hysteresis as it resolves); a cap
        # or deadline the version leaves to the run or the setting stays empty, so the copy
        # leaves it there too.
        resolved = {**limits_with_defaults(stored), **stored}
        for condition, (window, required) in hysteresis_of(stored).items():
            resolved[f"{condition}_window"], resolved[f"{condition}_required"] = window, required
        for key in FORM_LIMIT_KEYS:
            initial[limit_field(key)] = resolved.get(key)
        for condition in CONDITIONS:
            values = version.thresholds.get(condition, {})
            for part in THRESHOLD_PARTS:
                initial[threshold_field(condition, part)] = values.get(part)
            initial[question_field(condition)] = version.question_set.get(condition, "")
        return initial

    @classmethod
    def prefill(cls, initial: dict, query) -> tuple[dict, list[dict]]:
        """`initial` with every query parameter named like a field over it (a link offering
        suggested thresholds as an editable draft), and which fields it set: label, value.
        Nothing is checked here: the values only fill the form, which is checked on saving."""
        form = cls()
        initial = dict(initial)
        applied = []
        for name, field in form.fields.items():
            if name not in query or name in NOT_PREFILLED:
                continue
            if isinstance(field, forms.MultipleChoiceField):
                value = query.getlist(name)
                shown = ", ".join(value)
            elif isinstance(field, forms.BooleanField):
                value = query.get(name, "").lower() in ("1", "true", "on", "yes")
                shown = _("yes") if value else _("no")
            else:
                value = shown = query.get(name, "")
            initial[name] = value
            applied.append({"name": name, "label": field.label or name, "value": shown})
        return initial, applied

    def content(self) -> dict:
        """policy_version_create's keyword arguments from the cleaned data."""
        data = self.cleaned_data
        tools = [
            name.strip()
            for line in data.get("quorum_tools", "").splitlines()
            for name in line.split(",")
            if name.strip()
        ]
        quorum: dict = {}
        if data.get("quorum_regulated"):
            quorum["regulated"] = True
        if tools:
            quorum["tools"] = tools
        return {
            "label": data.get("label", ""),
            "copied_from": data.get("copied_from"),
            "question_set_version": data.get("question_set_version", ""),
            "thresholds": {
                condition: {
                    part: data.get(threshold_field(condition, part)) for part in THRESHOLD_PARTS
                }
                for condition in CONDITIONS
            },
            "question_set": {
                condition: data.get(question_field(condition), "") for condition in CONDITIONS
            },
            "quorum": quorum,
            "judge": self._judge(data),
            "limits": {
                key: data[limit_field(key)]
                for key in FORM_LIMIT_KEYS
                if data.get(limit_field(key)) is not None
            },
        }

    @staticmethod
    def _judge(data: dict) -> dict:
        """The judge settings from the three fields: {} when none is set (no judge)."""
        model, conditions = data.get("judge_model") or "", data.get("judge_conditions") or []
        timeout = data.get("judge_timeout_seconds")
        if not model and not conditions and timeout is None:
            return {}
        judge: dict = {"adapter": "openai", "model": model, "conditions": list(conditions)}
        if timeout is not None:
            judge["timeout_seconds"] = timeout
        return judge

    def clean(self) -> dict:
        cleaned = super().clean()
        content = self.content()
        # The service's rules on what did parse, so one answer names every bad field; a field
        # that failed its own check already says why, and its missing value would say it again.
        failed = set(self.errors)
        problems = policy_version_problems(
            thresholds=content["thresholds"],
            question_set=content["question_set"],
            question_set_version=content["question_set_version"],
            quorum=content["quorum"],
            judge=content["judge"],
            limits=content["limits"],
        )
        problems += reworded_problems(
            question_set=content["question_set"],
            question_set_version=content["question_set_version"],
            source=content["copied_from"],
        )
        problems += policy_version_unregistered_problems(
            quorum=content["quorum"], judge=content["judge"]
        )
        for problem in problems:
            name = _field_of(problem)
            if name not in failed:
                self.add_error(name, problem.split(": ", 1)[-1])
        return cleaned

    def clean_copied_from(self) -> PolicyVersion | None:
        pk = self.cleaned_data.get("copied_from")
        if pk is None:
            return None
        found = PolicyVersion.objects.filter(pk=pk).first()
        if found is None:
            raise forms.ValidationError(
                _("No policy version %(pk)s to copy from; open the page again.") % {"pk": pk}
            )
        return found

    def question_rows(self) -> list[dict]:
        """Per condition, its question field and whether it is reworded (reworded_conditions)
        from the version being edited, read from the raw input as the preview is."""
        reworded = set(self.reworded())
        return [
            {"condition": c, "field": self[question_field(c)], "reworded": c in reworded}
            for c in CONDITIONS
        ]

    def reworded(self) -> list[str]:
        """The conditions whose question the input rewords under an unchanged question-set
        version, from the raw input: the editor marks them while the admin types."""
        raw = str(self._raw("copied_from") or "")
        source = PolicyVersion.objects.filter(pk=int(raw)).first() if raw.isdigit() else None
        return reworded_conditions(
            question_set={c: self._raw(question_field(c)) or "" for c in CONDITIONS},
            question_set_version=self._raw("question_set_version") or "",
            source=source,
        )

    def derived_thresholds(self) -> list[dict]:
        """Per condition, the t* and band the typed costs give, or why they give none; read
        from the raw input so it can be shown while the form is still being filled in."""
        rows = []
        for condition in CONDITIONS:
            row = {"condition": condition, "t_star": None, "low": None, "high": None, "why": ""}
            row.update(
                {part: self._raw(threshold_field(condition, part)) for part in THRESHOLD_PARTS}
            )
            try:
                values = {
                    part: float(self._raw(threshold_field(condition, part)))
                    for part in THRESHOLD_PARTS
                }
                threshold = Threshold(**values)
            except (TypeError, ValueError) as error:
                row["why"] = (
                    _("give both costs (> 0) and δ") if "float" in str(error) else str(error)
                )
            else:
                low, high = threshold.t_star - threshold.delta, threshold.t_star + threshold.delta
                # The band drawn on a 0–100 scale (the SVG's own units).
                if low <= 0 or high >= 1:
                    # Saving refuses it (policy_validation); say so while it is typed.
                    room = min(threshold.t_star, 1 - threshold.t_star)
                    row["band_problem"] = (
                        _("the band leaves 0–1, which saving refuses: δ must be below %(room)s")
                        % {"room": number_format(float(f"{room:.3g}"))}
                        if room > 0
                        else _("t* is at the edge of 0–1: no band fits, bring the costs closer")
                    )
                row.update(
                    t_star=threshold.t_star,
                    low=low,
                    high=high,
                    x_low=round(max(low, 0.0) * 100, 2),
                    x_width=round((min(high, 1.0) - max(low, 0.0)) * 100, 2),
                    x_t_star=round(threshold.t_star * 100, 2),
                )
            rows.append(row)
        return rows

    def _raw(self, name: str):
        if self.is_bound:
            return self.data.get(self.add_prefix(name))
        return self.initial.get(name)


def _default_words(key: str) -> str:
    """What an empty limit field means, in the words of the form's help line."""
    if key.endswith(("_window", "_required")):
        run_wide = "hysteresis_window" if key.endswith("_window") else "hysteresis_required"
        return str(LIMIT_DEFAULTS[run_wide])
    if key == "escalation_hours":
        return f"GUARDIAN_ESCALATION_HOURS ({escalation_hours({})})"
    if LIMIT_DEFAULTS[key] is not None:
        return str(LIMIT_DEFAULTS[key])
    engine = getattr(Budgets(), key)
    return _("the run's own budget, else %(engine)s") % {
        "engine": engine if engine is not None else _("none")
    }


def _field_of(problem: str) -> str | None:
    """The form field a service problem ("thresholds.drift.delta: …") belongs to."""
    path = problem.split(":", 1)[0]
    parts = path.split(".")
    if parts[0] == "thresholds" and len(parts) >= 3 and parts[1] in CONDITIONS:
        part = parts[2] if parts[2] in THRESHOLD_PARTS else "delta"
        return threshold_field(parts[1], part)
    if parts[0] == "question_set" and len(parts) >= 2 and parts[1] in CONDITIONS:
        return question_field(parts[1])
    if parts[0] == "question_set_version":
        return "question_set_version"
    if parts[0].startswith("quorum"):
        return "quorum_tools"
    if parts[0] == "judge":
        key = path.split(".", 1)[1].split("[", 1)[0] if "." in path else "model"
        names = {"conditions": "judge_conditions", "timeout_seconds": "judge_timeout_seconds"}
        return names.get(key, "judge_model")
    if parts[0] == "limits" and len(parts) >= 2 and parts[1] in LIMIT_DEFAULTS:
        return limit_field(parts[1])
    return None
