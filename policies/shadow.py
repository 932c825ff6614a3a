"""Shadow mode: a candidate policy version or guardian model version decides the turns of live
runs beside their real decisions. What it decides is recorded (ShadowDecision) and never
enforced: nothing here writes to a run, a turn, a decision or an escalation.

The candidate decides after the fact, in a Celery task (beat, every few seconds), not in the
turn: a turn costs the same with or without a trial, and a slow candidate model cannot delay
live work. It decides with exactly what the real decision had, read from the log: the
guardian's answers (or, for a candidate model, its own answers to the projection the guardian
saw), the turn's usage, calls and loop-step reasons, the replans so far (the projection holds
them) and the run's earlier decided turns for the policy's windows.
"""

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from guardian_core.engine.conditions import Condition, Malformed
from guardian_core.engine.policy import (
    POST_EXECUTION_CONDITIONS,
    Outcome,
    PastTurn,
    history_needed,
)
from guardian_core.engine.thresholds import Policy
from guardian_core.models import GuardianModelVersion, PolicyVersion
from policies.models import ShadowDecision, ShadowTrial
from runs import mapping
from runs.models import Decision, DecisionOutcome, Run
from runs.replay import replay_turn_row

BATCH = 500


# ---- starting and stopping ------------------------------------------------------------------


def shadow_trial_start(
    *,
    policy_version_id: int | None = None,
    guardian_model_version_id: int | None = None,
    comment: str,
    user=None,
) -> ShadowTrial:
    """Start a trial of one candidate on every turn decided from now on.

    Raises ValidationError naming every problem: no or two candidates, an active candidate
    (it already decides for real), an invalid policy version, a blank comment, a trial of the
    same candidate already running."""
    problems: dict[str, list[str]] = {}
    if not comment.strip():
        problems["comment"] = [_("Say what this trial is for.")]
    if (policy_version_id is None) == (guardian_model_version_id is None):
        problems["candidate"] = [_("Choose one candidate: a policy version or a guardian model.")]
    candidate = None
    if policy_version_id is not None:
        candidate = PolicyVersion.objects.filter(pk=policy_version_id).first()
        if candidate is None:
            problems["candidate"] = [
                _("No policy version with id %(id)s.") % {"id": policy_version_id}
            ]
        elif candidate.is_active:
            problems["candidate"] = [
                _("Policy version %(version)s is active: it already decides every new run.")
                % {"version": candidate}
            ]
        elif candidate.problems():
            problems["candidate"] = [
                _("Policy version %(version)s is invalid: %(problems)s")
                % {"version": candidate, "problems": "; ".join(candidate.problems())}
            ]
    elif guardian_model_version_id is not None:
        candidate = GuardianModelVersion.objects.filter(pk=guardian_model_version_id).first()
        if candidate is None:
            problems["candidate"] = [
                _("No guardian model version with id %(id)s.") % {"id": guardian_model_version_id}
            ]
        elif candidate.is_active:
            problems["candidate"] = [
                _(
                    "Guardian model version %(number)s is active: it already answers for every "
                    "%(adapter)s run."
                )
                % {"number": candidate.number, "adapter": candidate.adapter}
            ]
    if problems:
        raise ValidationError(problems)
    last = Decision.objects.aggregate(last=Max("pk"))["last"] or 0
    try:
        with transaction.atomic():
            trial = ShadowTrial.objects.create(
                policy_version_id=policy_version_id,
                guardian_model_version_id=guardian_model_version_id,
                comment=comment.strip(),
                started_by=user if getattr(user, "is_authenticated", False) else None,
                after_decision_id=last,
                cursor=last,
            )
    except IntegrityError:
        raise ValidationError(
            {
                "candidate": [
                    _("A trial of %(candidate)s is already running; stop it first.")
                    % {"candidate": candidate}
                ]
            }
        ) from None
    return trial


def shadow_trial_stop(*, trial_id: int, user=None) -> bool:
    """Stop a trial (what it recorded stays); True if it was running."""
    return bool(
        ShadowTrial.objects.filter(pk=trial_id, stopped_at__isnull=True).update(
            stopped_at=timezone.now(),
            stopped_by=user if getattr(user, "is_authenticated", False) else None,
        )
    )


def shadow_trials_stop_for(
    *,
    policy_version_id: int | None = None,
    guardian_model_version_id: int | None = None,
    user=None,
    note: str,
) -> int:
    """Stop the running trial of a candidate that has just been activated (call it in the
    activation's transaction): from now on new runs decide under it for real, so the trial
    would compare it with itself. Returns how many were stopped (0 or 1)."""
    trials = ShadowTrial.objects.filter(stopped_at__isnull=True)
    if policy_version_id is not None:
        trials = trials.filter(policy_version_id=policy_version_id)
    else:
        trials = trials.filter(guardian_model_version_id=guardian_model_version_id)
    return trials.update(
        stopped_at=timezone.now(),
        stopped_by=user if getattr(user, "is_authenticated", False) else None,
        stop_note=note,
    )


# ---- deciding in shadow ---------------------------------------------------------------------


def shadow_trials_catch_up() -> int:
    """Bring every running trial up to the decisions logged so far (beat); how many decided."""
    total = 0
    for trial_id in ShadowTrial.objects.filter(stopped_at__isnull=True).values_list(
        "pk", flat=True
    ):
        while True:
            done = shadow_trial_catch_up(trial_id=trial_id)
            total += done
            if done < BATCH:
                break
    return total


def shadow_trial_catch_up(*, trial_id: int, limit: int = BATCH) -> int:
    """Decide, under the trial's candidate, the next `limit` decisions logged after its
    cursor; returns how many were considered. Idempotent: the trial's row is locked while the
    batch is decided and its cursor moves in the same transaction, so a second worker finds
    the batch done (or skips the trial while it is being decided)."""
    # An id is taken before its transaction commits: a turn still committing may hold a lower
    # id than one already visible. Reading only settled decisions, and stopping at the first
    # younger one, passes none over.
    cutoff = timezone.now() - timedelta(seconds=_settle_seconds())
    with transaction.atomic():
        trial = (
            ShadowTrial.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("policy_version", "guardian_model_version")
            .filter(pk=trial_id, stopped_at__isnull=True)
            .first()
        )
        if trial is None:
            return 0
        rows = list(
            Decision.objects.filter(pk__gt=trial.cursor)
            .select_related("turn__run")
            # What a shadow decision does not read, some of it large: not fetched 500 times.
            .defer(*_UNREAD)
            .order_by("pk")[:limit]
        )
        settled = []
        for decision in rows:
            if decision.created_at > cutoff:
                break
            settled.append(decision)
        decider = _Decider(trial)
        shadow_rows, skipped = [], 0
        for decision in settled:
            row = decider.decide(decision)
            if row is None:
                skipped += 1
            else:
                shadow_rows.append(row)
        ShadowDecision.objects.bulk_create(shadow_rows, ignore_conflicts=True)
        changes = {"caught_up_at": timezone.now()}
        if settled:
            changes.update(cursor=settled[-1].pk, skipped=trial.skipped + skipped)
        ShadowTrial.objects.filter(pk=trial.pk).update(**changes)
    return len(settled)


_UNREAD = (
    "risk_answers",
    "thresholds",
    "turn__proposal",
    "turn__steps",
    "turn__state",
    "turn__risk_projections",
    "turn__feedback",
    "turn__timings",
    "turn__run__state",
    "turn__run__final_answer",
    "turn__run__last_error",
)


def _settle_seconds() -> float:
    return settings.GUARDIAN_SHADOW_SETTLE_SECONDS


class _Decider:
    """The candidate's decision on one logged decision (None when it cannot decide it)."""

    def __init__(self, trial: ShadowTrial) -> None:
        self.trial = trial
        self.policies: dict[tuple, Policy] = {}
        # Per run: the last turn decided in this batch and the window after it. A batch holds
        # a run's turns one after another, so only its first turn of the batch queries.
        self.windows: dict[int, tuple[int, deque[PastTurn]]] = {}

    def _window(self, run_id: int, index: int, wanted: int) -> deque[PastTurn]:
        known = self.windows.get(run_id)
        if known is None or known[0] != index - 1 or known[1].maxlen != max(wanted, 1):
            known = (index - 1, _history(run_id, index, wanted))
            self.windows[run_id] = known
        return known[1]

    def decide(self, decision: Decision) -> ShadowDecision | None:
        turn = decision.turn
        run = turn.run
        if run.actor == "coder_reviewer":  # decided by the review loop, not by the policy
            return None
        model = self.trial.guardian_model_version
        if model is not None and run.guardian != model.adapter:
            return None
        policy = self._policy(run)
        answers = decision.answers or {}
        asked: dict = {}
        held = any(r.get("source") == "gate" for r in decision.reasons or [])
        if model is not None:
            # A candidate model answers the projection the guardian saw; no judge is asked
            # for it, so its band goes to people, as it would on a run without a judge.
            asked = {} if held else _ask(model, run, turn.projection)
            answers = asked
        wanted = history_needed(policy)
        window = self._window(run.pk, turn.index, wanted)
        replayed = replay_turn_row(
            run_id=run.pk,
            row=(
                turn.index,
                turn.usage,
                decision.outcome,
                answers,
                decision.fired,
                decision.call_signatures,
                decision.stop_reason,
                decision.reasons,
                True,
            ),
            policy=policy,
            history=list(window) if wanted else [],
            replans=int((turn.projection or {}).get("replans", 0) or 0),
        )
        outcome, stop_reason = replayed.replayed_outcome, replayed.replayed_stop_reason
        # The real decision joins the window the run's next turn reads (a real history).
        window.append(_past(decision.outcome, decision.fired, decision.call_signatures))
        self.windows[run.pk] = (turn.index, window)
        return ShadowDecision(
            trial=self.trial,
            decision=decision,
            run=run,
            turn_index=turn.index,
            real_outcome=decision.outcome,
            real_stop_reason=decision.stop_reason,
            outcome=outcome,
            stop_reason=stop_reason,
            fired=list(replayed.replayed_fired),
            reasons=list(replayed.replayed_reasons),
            answers=asked,
            differs=(outcome, stop_reason) != (decision.outcome, decision.stop_reason),
        )

    def _policy(self, run: Run) -> Policy:
        version = self.trial.policy_version
        if version is None:
            return mapping.policy_for_run(run)  # a candidate model: the run's own policy
        key = tuple(sorted((run.budgets or {}).items()))
        if key not in self.policies:
            self.policies[key] = mapping.policy_from_version(version, budgets=run.budgets or {})
        return self.policies[key]


def _history(run_id: int, index: int, wanted: int) -> deque[PastTurn]:
    """The run's decided turns before `index` that the policy's windows read, oldest first:
    one indexed query of at most `wanted` small rows, whatever the run's length."""
    window: deque[PastTurn] = deque(maxlen=max(wanted, 1))
    if not wanted:
        return window
    rows = (
        Decision.objects.filter(turn__run_id=run_id, turn__index__lt=index)
        .order_by("-turn__index")
        .values_list("outcome", "fired", "call_signatures")[:wanted]
    )
    for outcome, fired, calls in reversed(list(rows)):
        window.append(_past(outcome, fired, calls))
    return window


def _past(outcome: str, fired: list, calls: list) -> PastTurn:
    return PastTurn(
        outcome=Outcome(outcome),
        fired=frozenset(Condition(name) for name in fired),
        calls=tuple(calls),
    )


_GUARDIANS: dict[tuple, object] = {}


def _ask(model: GuardianModelVersion, run: Run, projection: Mapping) -> dict:
    """The candidate model's answers to `projection` (all malformed when it fails, as in a
    turn), as the decision log writes answers."""
    if not projection:
        return {}
    try:
        guardian = _candidate_guardian(model, run)
        answers = dict(guardian.answer(projection, POST_EXECUTION_CONDITIONS))
    except Exception as exc:  # a failing candidate is recorded as such, never raised into beat
        failure = Malformed(f"guardian failed: {type(exc).__name__}: {exc}"[:300])
        answers = {c.value: failure for c in POST_EXECUTION_CONDITIONS}
    return mapping.answers_to_json({str(key): value for key, value in answers.items()})


def _candidate_guardian(model: GuardianModelVersion, run: Run):
    """The candidate model on the run's adapter, built once per process (a retrained local
    guardian trains at first use); a network guardian asks the run's pinned questions."""
    from runs.guardian_models import versioned_guardian
    from runs.ports import base_guardian

    key = (model.pk, run.guardian, run.policy_version_id)
    if key not in _GUARDIANS:
        if len(_GUARDIANS) > 16:
            _GUARDIANS.clear()
        guardian = versioned_guardian(
            model, base_guardian(run), deadline_seconds=settings.GUARDIAN_DEADLINE_SECONDS
        )
        warm = getattr(guardian, "warm", None)
        if callable(warm):
            warm()
        _GUARDIANS[key] = guardian
    return _GUARDIANS[key]


# ---- what the pages read --------------------------------------------------------------------


@dataclass(frozen=True)
class TrialSummary:
    decided: int
    differs: int
    real_escalations: int
    candidate_escalations: int
    # (real outcome, candidate outcome, count) for every pair seen, most frequent first.
    transitions: tuple[tuple[str, str, int], ...]

    @property
    def real_escalation_rate(self) -> float | None:
        return self.real_escalations / self.decided if self.decided else None

    @property
    def candidate_escalation_rate(self) -> float | None:
        return self.candidate_escalations / self.decided if self.decided else None


def shadow_trial_summary(trial: ShadowTrial) -> TrialSummary:
    """Counts over the trial's decisions: two grouped queries, however many it holds."""
    escalate = DecisionOutcome.ESCALATE
    rows = trial.decisions.aggregate(
        decided=Count("pk"),
        differs=Count("pk", filter=Q(differs=True)),
        real=Count("pk", filter=Q(real_outcome=escalate)),
        candidate=Count("pk", filter=Q(outcome=escalate)),
    )
    pairs = (
        trial.decisions.values_list("real_outcome", "outcome")
        .annotate(n=Count("pk"))
        .order_by("-n", "real_outcome", "outcome")
    )
    return TrialSummary(
        decided=rows["decided"],
        differs=rows["differs"],
        real_escalations=rows["real"],
        candidate_escalations=rows["candidate"],
        transitions=tuple((real, new, n) for real, new, n in pairs),
    )


def shadow_trials() -> Iterable[ShadowTrial]:
    return ShadowTrial.objects.select_related(
        "policy_version", "guardian_model_version", "started_by", "stopped_by"
    )


def shadow_differences(trial: ShadowTrial):
    """The turns where the candidate decided otherwise, newest first (paginated by the page)."""
    return trial.decisions.filter(differs=True).order_by("-pk")


def shadow_candidates() -> tuple[list[PolicyVersion], list[GuardianModelVersion]]:
    """What may be tried in shadow: valid policy versions and guardian model versions that are
    not active."""
    versions = [v for v in PolicyVersion.objects.filter(is_active=False) if not v.problems()]
    models = list(GuardianModelVersion.objects.filter(is_active=False))
    return versions, models
