"""Writes on policy versions: create a valid one, activate one through the regression gate,
retire one.

A version's content is validated in full (guardian_core/policy_validation.py) before it is
stored and again before it becomes active, so new runs are never pinned to a version the engine
cannot use. Once a run pins a version its content is frozen (a trigger, runs/db_triggers.py);
changing it means making a new version.
"""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils.translation import gettext as _

from guardian_core.models import PolicyVersion, problems_by_field
from guardian_core.policy_validation import (
    policy_version_problems,
    registered_model_names,
    reworded_problems,
    thresholds_with_t_star,
)
from policies import policy_gate
from policies.models import PolicyActivation
from runs.tools import registered_tool_names


class GateRefused(ValidationError):
    """Activation refused by the regression gate, no override reason given; `report` is the
    gate's report (its "reasons" say why). Any other problem of the request rides along."""

    def __init__(self, report: dict, others: dict | None = None):
        super().__init__(
            {
                **(others or {}),
                "override_reason": [
                    _("The regression gate refused this version; give a reason to override it.")
                ],
            }
        )
        self.report = report


def policy_version_create(
    *,
    thresholds: dict,
    question_set: dict,
    question_set_version: str,
    label: str = "",
    number: int | None = None,
    created_by=None,
    copied_from: PolicyVersion | None = None,
    activate: bool = False,
    comment: str = "created and activated",
    override_reason: str = "",
    quorum: dict | None = None,
    judge: dict | None = None,
    limits: dict | None = None,
) -> PolicyVersion:
    """A new version (the next number unless given), stored with t* computed from the costs.
    `quorum` asks two distinct approvers for some held calls: {"regulated": true} and/or
    {"tools": [names]}. `judge` puts a second-tier judge on the uncertain band
    ({"adapter": "openai", "model": …, "conditions": […]}); none when empty. `copied_from` is
    the version it was edited from: a question reworded from it needs a new
    question_set_version. With `activate` it is activated through the regression gate
    (policy_version_activate) in the same transaction: all or nothing.

    Raises ValidationError naming every problem of the content at once; GateRefused (nothing
    stored) when the gate refuses the activation and no `override_reason` is given.
    """
    problems = policy_version_problems(
        thresholds=thresholds,
        question_set=question_set,
        question_set_version=question_set_version,
        quorum=quorum,
        judge=judge,
        limits=limits,
    )
    problems += reworded_problems(
        question_set=question_set, question_set_version=question_set_version, source=copied_from
    )
    problems += policy_version_unregistered_problems(quorum=quorum, judge=judge)
    if problems:
        raise ValidationError(problems_by_field(problems))
    with transaction.atomic():
        if number is None:
            number = (PolicyVersion.objects.aggregate(top=Max("number"))["top"] or 0) + 1
        version = PolicyVersion.objects.create(
            number=number,
            label=label,
            thresholds=thresholds_with_t_star(thresholds),
            question_set=dict(question_set),
            question_set_version=question_set_version,
            quorum=dict(quorum or {}),
            judge=dict(judge or {}),
            limits=dict(limits or {}),
            copied_from=copied_from,
            created_by=created_by,
        )
        if activate:
            # The gate measures the stored row (it evaluates by version number); a refusal
            # raises here and the version's insert is rolled back with it.
            policy_version_activate(
                version_id=version.pk,
                comment=comment,
                user=created_by,
                override_reason=override_reason,
            )
            version.refresh_from_db()
    return version


def policy_version_activate(
    *,
    version_id: int,
    comment: str = "activated",
    user=None,
    gate_report: dict | None = None,
    override_reason: str = "",
) -> PolicyVersion:
    """Make `version_id` the version new runs pin (the one active before is retired), with its
    activation record (who, why, the gate's report, an override's reason) in the same
    transaction. The gate's report is the caller's when given (a page that showed it), else
    measured here: no path activates a version the gate has not looked at.

    Raises ValidationError when the version is invalid (a version saved before validation
    existed, or written around it, must not reach a run) or when `comment` is blank, and
    GateRefused when the gate's report refused and no `override_reason` is given.
    """
    bad = {}
    if not comment.strip():
        bad["comment"] = [_("Say why this version is activated.")]
    if gate_report is None:
        candidate = PolicyVersion.objects.get(pk=version_id)
        # An invalid version is refused below, under the lock, with its every problem.
        if not candidate.problems():
            # Measured before the versions are locked: the evaluation can take seconds and
            # must not hold every other activation up.
            gate_report = policy_gate.gate_report(candidate=candidate)
    if gate_report and gate_report.get("refused") and not override_reason.strip():
        raise GateRefused(gate_report, bad)
    if bad:
        raise ValidationError(bad)
    with transaction.atomic():
        # Lock every version in one order so two activations at once queue up instead of
        # tripping the one-active constraint; the table holds a handful of rows.
        list(PolicyVersion.objects.select_for_update().order_by("pk").values_list("pk"))
        version = PolicyVersion.objects.get(pk=version_id)
        problems = version.problems()
        if problems:
            raise ValidationError(
                {
                    "__all__": [
                        _("Policy version %(version)s cannot be activated; it is invalid:")
                        % {"version": version},
                        *problems,
                    ]
                }
            )
        active = (
            PolicyVersion.objects.filter(is_active=True).values_list("number", flat=True).first()
        )
        if gate_report and "current" in gate_report and gate_report["current"] != active:
            # Another admin activated a version while the gate measured against the one before.
            raise ValidationError(
                {
                    "__all__": [
                        _(
                            "The active version changed while the gate measured v%(number)s "
                            "against v%(current)s; open the activation again."
                        )
                        % {"number": version.number, "current": gate_report["current"]}
                    ]
                }
            )
        PolicyVersion.objects.filter(is_active=True).exclude(pk=version.pk).update(is_active=False)
        PolicyVersion.objects.filter(pk=version.pk).update(is_active=True)
        PolicyActivation.objects.create(
            version=version,
            activated_by=user if getattr(user, "is_authenticated", False) else None,
            comment=comment.strip(),
            gate_report=gate_report or {},
            override_reason=override_reason.strip()
            if gate_report and gate_report.get("refused")
            else "",
        )
        from policies.shadow import shadow_trials_stop_for  # runs imports this module

        shadow_trials_stop_for(
            policy_version_id=version.pk,
            user=user,
            note=f"v{version.number} was activated: new runs now decide under it for real.",
        )
    version.is_active = True
    return version


def policy_version_deactivate(*, version_id: int) -> bool:
    """Retire `version_id`; until another is activated no run can start. True if it was active."""
    return bool(PolicyVersion.objects.filter(pk=version_id, is_active=True).update(is_active=False))


def policy_version_unregistered_problems(*, quorum: object, judge: object) -> list[str]:
    """The names a new version's quorum and judge give that nothing registered answers to:
    a quorum tool that is neither a registered tool (runs/tools.py) nor one an external run
    registered, and a judge model this deployment does not know (GUARDIAN_JUDGE_MODELS,
    GUARDIAN_MODEL_PRICES, the OPENAI_*_MODEL settings). Checked when a version is written,
    not when a run starts: a tool retired later does not invalidate the versions that named
    it. Shapes are policy_version_problems' to check; only well-formed names are looked up."""
    problems = []
    tools = quorum.get("tools") if isinstance(quorum, dict) else None
    if isinstance(tools, list) and any(isinstance(name, str) for name in tools):
        known = registered_tool_names()
        problems += [
            (
                f"quorum.tools[{i}]: "
                + _("no tool named %(name)s is registered") % {"name": repr(name)}
            )[:300]
            for i, name in enumerate(tools)
            if isinstance(name, str) and name and name not in known
        ]
    model = judge.get("model") if isinstance(judge, dict) else None
    if isinstance(model, str) and model.strip():
        models = registered_model_names()
        if model not in models:
            listed = ", ".join(sorted(models)) or _("none")
            problems.append(
                "judge.model: "
                + _(
                    "no model named %(name)s is registered (known: %(known)s); add it to "
                    "GUARDIAN_JUDGE_MODELS or GUARDIAN_MODEL_PRICES"
                )
                % {"name": repr(model[:120]), "known": listed[:300]}
            )
    return problems


def policy_version_run_count(version: PolicyVersion) -> int:
    """How many runs pinned `version`; any at all freezes its content."""
    if version.pk is None:
        return 0
    return version.runs.count()
