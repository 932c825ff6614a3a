"""Replay of the decision log: a turn's logged decision fed back through the engine's `decide`
(decision replay), its logged projection put to the guardian again (guardian replay), and
the same with edits (the counterfactual probe). Nothing here writes.

Decision replay reads, per turn, only what the turn logged and the last `history_needed`
decided turns before it: the run's turns are streamed in order once, with a bounded window,
so a whole run costs one query whatever its length.
"""

import contextlib
import json
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from guardian_core.adapters.scripted import ScriptedGuardian
from guardian_core.engine.conditions import Condition, Malformed, compared_probability, parse_answer
from guardian_core.engine.judge import decide_judged
from guardian_core.engine.policy import (
    POST_EXECUTION_CONDITIONS,
    Outcome,
    PastTurn,
    Reason,
    history_needed,
)
from guardian_core.engine.thresholds import Policy
from runs import judging, mapping
from runs.models import Run, Turn
from runs.vocabulary import source_words

IDENTICAL = "identical"
DIFFERENT = "different"
# A coder ⇄ reviewer turn is decided by runs/review_rounds.py (the reviewer's verdict and the
# budgets), not by the threshold policy: `decide` cannot replay it, and saying "identical"
# would be a lie.
NOT_REPLAYABLE = "not_replayable"

# Reasons the loop step adds before `decide` (runs/turns.py via engine.loop.run_turn): they
# are inputs of the policy, logged in the decision's reasons, and fed back as they were.
LOOP_STEP_SOURCES = frozenset({"validation", "gate", "tool_error"})

# One row per decided turn, in index order; JSON read as text and decoded here (Django's
# JSONField converters cost more than the decoding itself). CAST ... AS text is the same on
# PostgreSQL (jsonb) and SQLite (text).
_ROWS_SQL = """
SELECT t."index", CAST(t.usage AS text), CAST(t.steps AS text), d.outcome,
    CAST(d.answers AS text), CAST(d.fired AS text), CAST(d.call_signatures AS text),
    d.stop_reason, CAST(d.reasons AS text), CAST(d.thresholds AS text)
FROM runs_turn t JOIN runs_decision d ON d.turn_id = t.id
WHERE t.run_id = %s AND t."index" >= %s AND t."index" < %s
ORDER BY t."index"
"""
_CHUNK = 2000


@dataclass(frozen=True)
class TurnReplay:
    """One turn's logged decision against the one `decide` gives again."""

    run_id: int
    turn_index: int
    status: str  # identical | different | not_replayable
    logged_outcome: str
    replayed_outcome: str | None = None
    logged_stop_reason: str = ""
    replayed_stop_reason: str = ""
    # What differs, in words: "outcome: continue → stop_success", "reasons", ...
    differences: tuple[str, ...] = ()
    logged_fired: tuple[str, ...] = ()
    replayed_fired: tuple[str, ...] = ()
    logged_reasons: tuple[dict, ...] = ()
    replayed_reasons: tuple[dict, ...] = ()
    note: str = ""

    @property
    def identical(self) -> bool:
        return self.status == IDENTICAL


@dataclass
class RunReplaySummary:
    """Counts over the turns of one or more runs."""

    identical: int = 0
    different: int = 0
    not_replayable: int = 0
    mismatches: list[TurnReplay] = field(default_factory=list)

    def add(self, result: TurnReplay) -> None:
        if result.status == IDENTICAL:
            self.identical += 1
        elif result.status == DIFFERENT:
            self.different += 1
            self.mismatches.append(result)
        else:
            self.not_replayable += 1

    @property
    def total(self) -> int:
        return self.identical + self.different + self.not_replayable


# ---- decision replay ------------------------------------------------------------------------


def answers_from_json(data: Mapping) -> dict:
    """Logged answers as `decide` took them: a malformed one ({"malformed": why}, see
    mapping.answer_to_json) becomes Malformed(why) again, so its reason reads the same. The
    judge's answers, when it was asked, stay under their own key (runs/judging.py)."""
    return {key: _answer_from_json(value) for key, value in data.items()}


def _answer_from_json(value: object) -> object:
    if isinstance(value, dict) and len(value) == 1 and "malformed" in value:
        return Malformed(str(value["malformed"]))
    return value


def _reason_from_json(data: Mapping) -> Reason:
    return Reason(
        source=data["source"],
        band=data["band"],
        outcome=Outcome(data["outcome"]),
        detail=data["detail"],
        value=data.get("value"),
        t_star=data.get("t_star"),
        delta=data.get("delta"),
    )


def _replans_before_decide(steps: list, replans_before_turn: int) -> int:
    """The replans the state held when the turn decided: those of earlier turns plus those of
    the verdict steps that open this turn (a person's answer that replanned). The turn's own
    steps start with the one that writes its pending calls; its replan, if any, comes after
    `decide` and is not counted here."""
    count = replans_before_turn
    for step in steps:
        if step.get("pending") is not None or step.get("migrated"):
            break
        count += 1 if step.get("replanned") else 0
    return count


def _replans_in(steps: list) -> int:
    return sum(1 for step in steps if step.get("replanned"))


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


def replay_turn_row(
    *,
    run_id: int,
    row: tuple,
    policy: Policy,
    history: list[PastTurn],
    replans: int,
) -> TurnReplay:
    """Replay one decided agent-loop turn from its logged, decoded row (index, usage, outcome,
    answers, fired, call signatures, stop reason, reasons, whether its thresholds are the
    policy's) against `history` (the decided turns before it, at least the policy's
    windows) and the replans made before it."""
    index, usage, outcome, answers, fired, signatures, stop_reason, reasons, thresholds_ok = row
    extra = tuple(_reason_from_json(r) for r in reasons if r.get("source") in LOOP_STEP_SOURCES)
    # A held step was decided by the gate's reasons alone: the guardian was not asked.
    held = any(r.source == "gate" for r in extra)
    # The judge's logged answers settle what they settled then (engine/judge.py).
    guardian_answers, judged = judging.answers_split(answers)
    decision = decide_judged(
        guardian_answers,
        judged,
        policy,
        history,
        mapping.usage_from_json(usage),
        calls=tuple(signatures),
        conditions=() if held else POST_EXECUTION_CONDITIONS,
        extra_reasons=extra,
        replans=replans,
    )
    replayed_reasons = tuple(reason.as_dict() for reason in decision.reasons)
    replayed_fired = tuple(sorted(condition.value for condition in decision.fired))
    replayed_stop = decision.stop_reason or ""
    differences = []
    if decision.outcome.value != outcome:
        differences.append(
            _("outcome: %(logged)s → %(replayed)s")
            % {"logged": outcome, "replayed": decision.outcome.value}
        )
    if replayed_stop != stop_reason:
        differences.append(
            _("stop reason: %(logged)s → %(replayed)s")
            % {"logged": stop_reason or "—", "replayed": replayed_stop or "—"}
        )
    if replayed_fired != tuple(fired):
        differences.append(
            _("fired: %(logged)s → %(replayed)s")
            % {"logged": ", ".join(fired) or "—", "replayed": ", ".join(replayed_fired) or "—"}
        )
    if list(replayed_reasons) != list(reasons):
        # Translators: a replay difference: the reasons differ from the logged ones.
        differences.append(_("reasons"))
    if not thresholds_ok:
        differences.append(_("thresholds in force differ from the pinned policy version's"))
    return TurnReplay(
        run_id=run_id,
        turn_index=index,
        status=DIFFERENT if differences else IDENTICAL,
        logged_outcome=outcome,
        replayed_outcome=decision.outcome.value,
        logged_stop_reason=stop_reason,
        replayed_stop_reason=replayed_stop,
        differences=tuple(differences),
        logged_fired=tuple(fired),
        replayed_fired=replayed_fired,
        logged_reasons=tuple(reasons),
        replayed_reasons=replayed_reasons,
    )


# A logged row is the log's word, which someone with the database may have altered: each
# column replay reads is checked for its shape first, and a row that is not what the app
# writes is a difference, named, never a crash that hides the turns (and runs) after it.
_OUTCOMES = frozenset(outcome.value for outcome in Outcome)
_CONDITIONS = frozenset(condition.value for condition in Condition)


def logged_row_problems(
    *, usage, steps, outcome, answers, fired, calls, reasons, thresholds
) -> list[str]:
    """What is malformed in a decided turn's logged columns ([] when each has the shape the
    app writes), in words naming the column."""
    problems = []
    if not isinstance(usage, Mapping):
        problems.append("usage is not an object")
    if not isinstance(steps, list) or not all(isinstance(s, Mapping) for s in steps):
        problems.append("steps is not a list of objects")
    if outcome not in _OUTCOMES:
        problems.append(f"outcome {str(outcome)[:40]!r} is not an outcome")
    if not isinstance(answers, Mapping):
        problems.append("answers is not an object")
    if not isinstance(fired, list) or not all(name in _CONDITIONS for name in fired):
        problems.append("fired is not a list of conditions")
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        problems.append("call_signatures is not a list of texts")
    if not isinstance(reasons, list) or not all(
        isinstance(r, Mapping)
        and isinstance(r.get("source"), str)
        and r.get("outcome") in _OUTCOMES
        and "band" in r
        and "detail" in r
        for r in reasons
    ):
        problems.append("reasons is not a list of reasons")
    if not isinstance(thresholds, Mapping):
        problems.append("thresholds is not an object")
    return problems


def _malformed(run_id: int, index: int, outcome, problems: list[str]) -> TurnReplay:
    return TurnReplay(
        run_id=run_id,
        turn_index=index,
        status=DIFFERENT,
        logged_outcome=str(outcome)[:40],
        differences=tuple(
            _("malformed log row: %(problem)s") % {"problem": problem} for problem in problems
        ),
        note=_("the logged row is not what the app writes: the log was altered"),
    )


_scan = json.JSONDecoder().scan_once


def _decoded_or_none(text):
    """`json.loads(text)`, or None when it refuses the text. A text the scanner reads whole
    (what the database gives back) is decoded without `loads`' checks around the scanner;
    anything else (whitespace around it, bytes, junk after it) goes through `loads` itself, so
    the result is the same either way."""
    if type(text) is str:
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError, TypeError):
            pass
        else:
            if end == len(text):
                return value
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _thresholds_of(policy: Policy) -> dict:
    return {condition.value: t.as_dict() for condition, t in policy.thresholds.items()}


@dataclass(frozen=True)
class ReplayState:
    """What decision replay carries from one decided turn to the next, all of it read from the
    log (never from what was replayed): the replans counted so far and the last decided turns
    the policy's windows read (`history_needed`). Two segments of a run replayed apart give
    what one pass gives exactly when the second starts from the state the first ended in."""

    replans: int = 0
    window: tuple[PastTurn, ...] = ()


class _Carry:
    """The state as it is carried along the rows (a bounded window and the replan count)."""

    def __init__(self, policy: Policy, state: ReplayState) -> None:
        self.keep = history_needed(policy)
        self.window: deque[PastTurn] = deque(state.window, maxlen=max(self.keep, 1))
        self.replans = state.replans

    def state(self) -> ReplayState:
        return ReplayState(self.replans, tuple(self.window)[-self.keep :] if self.keep else ())


def run_replay(
    *,
    run: Run,
    start_index: int = 0,
    limit: int | None = None,
    stop_index: int | None = None,
) -> Iterator[TurnReplay]:
    """Replay every decided turn of `run` in order (from `start_index`, before `stop_index`,
    at most `limit`).

    One streamed query: the turns are read in index order with .iterator() and only the last
    `history_needed(policy)` of them are kept for the policy's windows; the replan count is
    carried along from the turns' steps. Turns before `start_index` are read (the windows and
    the count need them) but not replayed."""
    if run.actor == "coder_reviewer":
        yield from _review_rounds(
            run=run, start_index=start_index, stop_index=stop_index, limit=limit
        )
        return
    policy = mapping.policy_for_run(run)
    yield from replay_rows(
        run_id=run.pk,
        policy=policy,
        carry=_Carry(policy, ReplayState()),
        read_from=0,
        start_index=start_index,
        stop_index=stop_index,
        limit=limit,
    )


def _review_rounds(
    *, run: Run, start_index: int, stop_index: int | None, limit: int | None
) -> Iterator[TurnReplay]:
    rows = (
        Turn.objects.filter(run_id=run.pk, decision__isnull=False, index__gte=start_index)
        .order_by("index")
        .values_list("index", "decision__outcome", "decision__stop_reason")
    )
    if stop_index is not None:
        rows = rows.filter(index__lt=stop_index)
    if limit is not None:
        rows = rows[:limit]
    for index, outcome, stop_reason in rows.iterator(chunk_size=2000):
        yield TurnReplay(
            run_id=run.pk,
            turn_index=index,
            status=NOT_REPLAYABLE,
            logged_outcome=outcome,
            logged_stop_reason=stop_reason,
            note=_(
                "a coder ⇄ reviewer round, decided by the review loop and not by the "
                "threshold policy"
            ),
        )


# No turn index reaches it (the column is a 32-bit integer).
_NO_STOP = 2**31


def replay_rows(
    *,
    run_id: int,
    policy: Policy,
    carry: _Carry,
    read_from: int,
    start_index: int,
    stop_index: int | None = None,
    limit: int | None = None,
) -> Iterator[TurnReplay]:
    """Read the run's decided turns from `read_from` (before `stop_index`), carry the state
    along them from `carry`, and replay those from `start_index` (at most `limit`). `carry`
    holds the state after the last row read when the generator is done."""
    keep = carry.keep
    window = carry.window
    # Texts repeated from turn to turn (the thresholds in force, a turn's steps, the fired
    # set) are decoded and checked once: a small cache, cleared when it grows.
    policy_thresholds = _thresholds_of(policy)
    thresholds_of = _TextCache(lambda text: _thresholds_read(text, policy_thresholds))
    steps_of = _TextCache(_steps_read)
    fired_of = _TextCache(_fired_read)
    done = 0
    upper = _NO_STOP if stop_index is None else stop_index
    # On PostgreSQL the rows are read inside a transaction of their own, which only reads:
    # there the server-side cursor streams them, where in autocommit Django declares it WITH
    # HOLD and PostgreSQL builds the whole result (the join, the sort, the casts) before the
    # first row comes. A caller that stops early (next() on the generator) ends it when the
    # generator is closed. Not on SQLite, where a transaction takes the write lock.
    reading = (
        transaction.atomic()
        if connection.vendor == "postgresql" and not connection.in_atomic_block
        else contextlib.nullcontext()
    )
    with reading, connection.chunked_cursor() as cursor:
        cursor.execute(_ROWS_SQL, [run_id, read_from, upper])
        while rows := cursor.fetchmany(_CHUNK):
            for index, usage, steps, outcome, answers, fired, calls, stop, reasons, th in rows:
                usage_data = _decoded_or_none(usage)
                answers_data = _decoded_or_none(answers)
                call_list = _decoded_or_none(calls)
                reasons_data = _decoded_or_none(reasons)
                steps_data, steps_shaped, before, total = steps_of(steps)
                fired_list, fired_shaped, fired_set = fired_of(fired)
                thresholds_data, thresholds_shaped, thresholds_ok = thresholds_of(th)
                problems = (
                    []
                    if steps_shaped
                    and fired_shaped
                    and thresholds_shaped
                    and _shaped(usage_data, outcome, answers_data, call_list, reasons_data)
                    else logged_row_problems(
                        usage=usage_data,
                        steps=steps_data,
                        outcome=outcome,
                        answers=answers_data,
                        fired=fired_list,
                        calls=call_list,
                        reasons=reasons_data,
                        thresholds=thresholds_data,
                    )
                )
                if problems:
                    # Named and passed over: the turns after it are still replayed (their
                    # windows without this one, which may make them differ too).
                    if index >= start_index:
                        if limit is not None and done >= limit:
                            return
                        yield _malformed(run_id, index, outcome, problems)
                        done += 1
                    continue
                if index >= start_index:
                    if limit is not None and done >= limit:
                        return
                    try:
                        replayed = replay_turn_row(
                            run_id=run_id,
                            row=(
                                index,
                                usage_data,
                                outcome,
                                answers_data,
                                fired_list,
                                call_list,
                                stop,
                                reasons_data,
                                thresholds_ok,
                            ),
                            policy=policy,
                            # The window's maxlen is `keep` (when not 0): it holds no more.
                            history=list(window) if keep else [],
                            replans=carry.replans + before,
                        )
                    except (ValueError, TypeError, KeyError, AttributeError) as exc:
                        # Shaped right but with values the engine refuses (an answer of an
                        # unknown kind, a usage that is not numbers): named, and on.
                        problem = f"{type(exc).__name__}: {exc}"[:300]
                        replayed = _malformed(run_id, index, outcome, [problem])
                    yield replayed
                    done += 1
                carry.replans += total
                window.append(PastTurn(_OUTCOME_OF[outcome], fired_set, tuple(call_list)))


# How many decided turns before a segment's first are read in full to guess its window: the
# policy's windows and some slack for malformed rows among them.
_GUESS_TAIL = 64
_STEPS_BEFORE_SQL = """
SELECT CAST(t.steps AS text), COUNT(*)
FROM runs_turn t JOIN runs_decision d ON d.turn_id = t.id
WHERE t.run_id = %s AND t."index" < %s
GROUP BY CAST(t.steps AS text)
"""


def replay_state_guess(*, run_id: int, policy: Policy, before_index: int) -> ReplayState:
    """A cheap guess at the state before `before_index`, without reading every earlier row in
    full: the replans counted from the distinct steps texts (the database groups them), the
    window from the last turns read as replay reads them. It is wrong only where an earlier
    row is malformed (replay passes over it) or the tail is too short: whoever uses it must
    check it against the state the previous segment ended in (runs/replay_parallel.py)."""
    tail_from = max(0, before_index - history_needed(policy) - _GUESS_TAIL)
    replans = 0
    with connection.cursor() as cursor:
        cursor.execute(_STEPS_BEFORE_SQL, [run_id, tail_from])
        for text, count in cursor.fetchall():
            steps = _decoded_or_none(text)
            if isinstance(steps, list) and all(isinstance(s, Mapping) for s in steps):
                replans += _replans_in(steps) * count
    carry = _Carry(policy, ReplayState(replans=replans))
    for _result in replay_rows(
        run_id=run_id,
        policy=policy,
        carry=carry,
        read_from=tail_from,
        start_index=before_index,
        stop_index=before_index,
    ):
        pass  # nothing is replayed: the rows read all come before `before_index`
    return carry.state()


class _TextCache:
    """`func(text)` remembered for the last few hundred distinct texts."""

    def __init__(self, func, size: int = 256) -> None:
        self.func, self.size, self.seen = func, size, {}

    def __call__(self, text: str):
        try:
            return self.seen[text]
        except KeyError:
            if len(self.seen) >= self.size:
                self.seen.clear()
            value = self.seen[text] = self.func(text)
            return value


# What replay_rows keeps of a repeated column's text: the decoded value, whether it has the
# shape the app writes (as logged_row_problems checks it), and what is derived from it.


def _steps_read(text) -> tuple[object, bool, int, int]:
    """(steps, shaped, replans of the verdict steps before the turn decided, replans of all its
    steps); the counts are 0 when the steps are not shaped."""
    steps = _decoded_or_none(text)
    if not isinstance(steps, list) or not all(isinstance(s, Mapping) for s in steps):
        return steps, False, 0, 0
    return steps, True, _replans_before_decide(steps, 0), _replans_in(steps)


def _fired_read(text) -> tuple[object, bool, frozenset[Condition]]:
    """(fired, shaped, the fired conditions; empty when not shaped)."""
    fired = _decoded_or_none(text)
    if not isinstance(fired, list) or not all(name in _CONDITIONS for name in fired):
        return fired, False, frozenset()
    return fired, True, frozenset(Condition(name) for name in fired)


def _thresholds_read(text, policy_thresholds: dict) -> tuple[object, bool, bool]:
    """(thresholds, shaped, whether they are the policy's)."""
    thresholds = _decoded_or_none(text)
    return thresholds, isinstance(thresholds, Mapping), thresholds == policy_thresholds


_OUTCOME_OF = {outcome.value: outcome for outcome in Outcome}


def _shaped(usage, outcome, answers, calls, reasons) -> bool:
    """True only when logged_row_problems finds nothing in these columns (those not cached by
    text), checked the cheap way: decoded JSON holds plain dicts, lists and strings, so an
    exact type test stands for the abstract one. False sends the row to logged_row_problems,
    which names what is wrong."""
    if (
        type(usage) is not dict
        or outcome not in _OUTCOMES
        or type(answers) is not dict
        or type(calls) is not list
        or type(reasons) is not list
    ):
        return False
    for call in calls:
        if type(call) is not str:
            return False
    for r in reasons:
        if not (
            type(r) is dict
            and type(r.get("source")) is str
            and r.get("outcome") in _OUTCOMES
            and "band" in r
            and "detail" in r
        ):
            return False
    return True


def turn_decision_replay(*, run: Run, index: int) -> TurnReplay | None:
    """The decision replay of one turn (None when it has no decision)."""
    return next(run_replay(run=run, start_index=index, limit=1), None)


# ---- guardian replay and the counterfactual probe -------------------------------------------


@dataclass(frozen=True)
class ConditionProbe:
    """One condition's logged (or original) and new answer, as the compared probability."""

    condition: str
    old: float | None
    new: float | None
    old_malformed: str = ""
    new_malformed: str = ""

    @property
    def same(self) -> bool:
        return self.old == self.new and self.old_malformed == self.new_malformed

    @property
    def moved(self) -> float | None:
        if self.old is None or self.new is None:
            return None
        return self.new - self.old


@dataclass(frozen=True)
class GuardianReplay:
    """The guardian asked again with a turn's logged (or edited) projection."""

    available: bool
    why_not: str = ""
    logged_model_version: str = ""
    model_version: str = ""
    conditions: tuple[ConditionProbe, ...] = ()
    old_outcome: str = ""
    new_outcome: str = ""
    new_stop_reason: str = ""
    old_stop_reason: str = ""

    # The run's guardian plays a scenario's script: its answers do not depend on the projection.
    scripted: bool = False

    @property
    def failures(self) -> tuple[ConditionProbe, ...]:
        """The conditions the guardian gave no usable answer for this time (a timeout, an
        error, a malformed answer)."""
        return tuple(probe for probe in self.conditions if probe.new_malformed)

    @property
    def failed_again(self) -> bool:
        """Every failure now was a failure in the log too: the same breakdown, not a
        reproduction of any probability."""
        return bool(self.failures) and all(probe.old_malformed for probe in self.failures)

    @property
    def failure_text(self) -> str:
        """Each distinct failure with the conditions it hit, in words."""
        by_why: dict[str, list[str]] = {}
        for probe in self.failures:
            by_why.setdefault(probe.new_malformed, []).append(probe.condition)
        return "; ".join(
            f"{why} ({', '.join(source_words(name, translated=True) for name in names)})"
            for why, names in by_why.items()
        )

    @property
    def identical(self) -> bool:
        # A guardian that fails again matches a failed log, but a failure reproduces nothing.
        return self.available and not self.failures and all(probe.same for probe in self.conditions)


def _probability(condition: Condition, raw: object) -> tuple[float | None, str]:
    answer = parse_answer(condition, _answer_from_json(raw))
    if isinstance(answer, Malformed):
        return None, answer.reason
    return compared_probability(condition, answer), ""


def _probes(logged: Mapping, new: Mapping) -> tuple[ConditionProbe, ...]:
    probes = []
    for condition in POST_EXECUTION_CONDITIONS:
        old_p, old_bad = _probability(condition, logged.get(condition.value))
        new_p, new_bad = _probability(condition, new.get(condition.value))
        probes.append(ConditionProbe(condition.value, old_p, new_p, old_bad, new_bad))
    return tuple(probes)


# Adapters that play a scenario's script (guardian_core/adapters/scripted.py): the answers
# come from the script by turn number, whatever the goal, tool results or arguments say. Asked
# again they repeat the script, so a replay only shows the log matches it and a probe moves
# nothing.
SCRIPTED_GUARDIANS = frozenset({"scripted"})


def guardian_plays_a_script(run: Run) -> bool:
    """Whether the run's guardian answers from a script rather than from the projection."""
    return run.guardian in SCRIPTED_GUARDIANS


# Why the guardian cannot be asked again on a turn: in full on the replay and probe pages, in a
# few words where the run page would otherwise link to a probe that has nothing to probe.
_NOT_ASKABLE = {
    "review_round": (
        gettext_lazy(
            "a coder ⇄ reviewer round is decided by the reviewer agent's verdict and the round "
            "cap; no guardian is asked on it"
        ),
        gettext_lazy("a coder ⇄ reviewer round, where no guardian is asked"),
    ),
    "undecided": (
        gettext_lazy(
            "the turn has no decision yet: it is in progress, or its worker stopped before "
            "the guardian answered"
        ),
        gettext_lazy("it has no decision yet"),
    ),
    "held": (
        gettext_lazy(
            "the step was held at the gate for a reviewer before any call ran, so the guardian "
            "was asked only each call's risk, never the questions that follow a step"
        ),
        gettext_lazy("held at the gate, the guardian was asked only each call's risk"),
    ),
    "no_projection": (
        gettext_lazy("the turn's log holds no projection: there is nothing the guardian was shown"),
        gettext_lazy("its log holds nothing the guardian was shown"),
    ),
}


def _not_askable_kind(run: Run, turn: Turn) -> str:
    if run.actor == "coder_reviewer":
        return "review_round"
    decision = getattr(turn, "decision", None)
    if decision is None:
        return "undecided"
    if turn.projection:
        return ""
    if any(isinstance(r, dict) and r.get("source") == "gate" for r in decision.reasons or []):
        return "held"
    return "no_projection"


@dataclass(frozen=True)
class HistoryShown:
    """The run's history as the guardian read it on a turn: after the step ran (`risk_only`
    False), or, on a step held at the gate, as the risk check read it before anything ran.
    Every summary is untrusted text (a user's words, an actor's message, a tool's name)."""

    items: tuple[tuple[object, str], ...]  # (turn, summary), oldest first
    risk_only: bool
    dropped: int  # older items the projection left out


def turn_history_shown(turn: Turn) -> HistoryShown | None:
    """What `turn`'s logged projection showed the guardian of the run's history (None when it
    logged none): the auditor reads the conversation and the steps the answers were given on."""
    projection = turn.projection if isinstance(turn.projection, dict) else {}
    risk_only = False
    if not projection.get("history"):
        first = (
            (turn.risk_projections or [None])[0]
            if isinstance(turn.risk_projections, list)
            else None
        )
        if isinstance(first, dict) and first.get("history"):
            projection, risk_only = first, True
    history = projection.get("history")
    if not isinstance(history, list) or not history:
        return None
    items = tuple(
        (item.get("turn"), str(item.get("summary", "")))
        if isinstance(item, dict)
        else (None, str(item))
        for item in history
    )
    truncated = projection.get("truncated")
    dropped = truncated.get("history_dropped", 0) if isinstance(truncated, dict) else 0
    return HistoryShown(items=items, risk_only=risk_only, dropped=int(dropped or 0))


def guardian_not_askable(*, run: Run, turn: Turn) -> str:
    """Why the guardian cannot be asked again on `turn`, in words ("" when it can): the true
    reason for each kind of turn that logged no projection."""
    kind = _not_askable_kind(run, turn)
    return str(_NOT_ASKABLE[kind][0]) if kind else ""


def turn_not_probeable(*, run: Run, turn_id: int) -> str:
    """Why turn `turn_id` of `run` cannot be probed, in a few words ("" when it can): one read of
    the turn, its decision's reasons and what the guardian was shown."""
    if run.actor == "coder_reviewer":
        return str(_NOT_ASKABLE["review_round"][1])
    turn = (
        Turn.objects.select_related("decision")
        .only("id", "run_id", "index", "projection", "decision__id", "decision__reasons")
        .get(pk=turn_id)
    )
    kind = _not_askable_kind(run, turn)
    return str(_NOT_ASKABLE[kind][1]) if kind else ""


def turn_not_probeable_as_shown(*, run: Run, decided: bool, held: bool) -> str:
    """turn_not_probeable without a read, for a turn the run page already shows: an agent turn
    logs what the guardian was shown whenever it decides without holding the step
    (engine/loop.py), so whether it decided and whether it was held say it all."""
    if run.actor == "coder_reviewer":
        kind = "review_round"
    elif not decided:
        kind = "undecided"
    else:
        kind = "held" if held else ""
    return str(_NOT_ASKABLE[kind][1]) if kind else ""


class ProbeInputError(ValueError):
    """An edit the probe cannot apply; the message names every bad field."""


@dataclass(frozen=True)
class ProbeEdits:
    drop_results: tuple[int, ...] = ()  # positions in last_results
    goal: str | None = None
    arguments: object = None  # the pending call's new arguments (a JSON object)
    has_arguments: bool = False

    @property
    def any(self) -> bool:
        return bool(self.drop_results) or self.goal is not None or self.has_arguments


def projection_edit(projection: Mapping, edits: ProbeEdits) -> dict:
    """A copy of `projection` with the edits applied; raises ProbeInputError naming every
    edit that does not fit it."""
    edited = json.loads(json.dumps(projection))
    problems = []
    results = list(edited.get("last_results") or [])
    bad = [n for n in edits.drop_results if not 0 <= n < len(results)]
    if bad:
        problems.append(
            "drop_result: "
            + _("no tool result %(numbers)s (the turn has %(count)s, numbered from 0)")
            % {"numbers": ", ".join(map(str, bad)), "count": len(results)}
        )
    if edits.goal is not None and not edits.goal.strip():
        problems.append("goal: " + _("must not be empty"))
    if edits.has_arguments:
        if not isinstance(edits.arguments, dict):
            problems.append("arguments: " + _("must be a JSON object"))
        if not isinstance(edited.get("pending_proposal"), dict):
            problems.append("arguments: " + _("the projection has no pending call to change"))
    if problems:
        raise ProbeInputError("; ".join(problems))
    if edits.drop_results:
        dropped = set(edits.drop_results)
        edited["last_results"] = [r for n, r in enumerate(results) if n not in dropped]
    if edits.goal is not None:
        edited["goal"] = edits.goal
    if edits.has_arguments:
        edited["pending_proposal"] = {**edited["pending_proposal"], "arguments": edits.arguments}
    return edited


def _guardian_for(run: Run):
    """The run's guardian adapter, or (None, why not)."""
    from runs.ports import build_guardian

    try:
        guardian = build_guardian(run)
    except (KeyError, ValueError, ImportError) as exc:
        return None, _("the guardian %(guardian)s cannot be built here: %(error)s") % {
            "guardian": repr(run.guardian),
            "error": exc,
        }
    warm = getattr(guardian, "warm", None)
    if callable(warm):
        warm()  # load (or, retrained, fit) before asking: a first use must be slow, not late
    return guardian, ""


def guardian_replay(
    *, run: Run, index: int, edits: ProbeEdits | None = None, guardian=None
) -> GuardianReplay:
    """Ask the run's guardian again with turn `index`'s logged projection (edited by `edits`
    for a probe) and decide with the run's policy: per condition the logged and the new
    probability, and the logged and the new outcome. Nothing is written.

    A replay (no edits) is only made against the same model version the turn logged: a
    guardian that now reports another version is "not available", not compared."""
    turn = Turn.objects.select_related("decision").get(run_id=run.pk, index=index)
    decision = getattr(turn, "decision", None)
    why_not = guardian_not_askable(run=run, turn=turn)
    if why_not:
        return GuardianReplay(
            False,
            why_not,
            logged_model_version=decision.guardian_model_version if decision else "",
        )
    problems = (
        []
        if decision is None
        else logged_row_problems(
            usage=turn.usage,
            steps=turn.steps,
            outcome=decision.outcome,
            answers=decision.answers,
            fired=decision.fired,
            calls=decision.call_signatures,
            reasons=decision.reasons,
            thresholds=decision.thresholds,
        )
    )
    if not isinstance(turn.projection, Mapping):
        problems.append("projection is not an object")
    if problems:
        return GuardianReplay(
            False,
            "the turn's log is malformed (it was altered): " + "; ".join(problems),
            logged_model_version=str(decision.guardian_model_version),
        )
    projection = projection_edit(turn.projection, edits) if edits else turn.projection
    if guardian is None:
        guardian, why = _guardian_for(run)
        if guardian is None:
            return GuardianReplay(False, why, logged_model_version=decision.guardian_model_version)
    version = str(getattr(guardian, "model_version", "unknown"))
    if edits is None and version != decision.guardian_model_version:
        return GuardianReplay(
            False,
            _(
                "the pinned model version %(pinned)s is no longer available (the guardian now "
                "is %(version)s)"
            )
            % {"pinned": decision.guardian_model_version, "version": version},
            logged_model_version=decision.guardian_model_version,
            model_version=version,
        )
    try:
        new = dict(guardian.answer(projection, POST_EXECUTION_CONDITIONS))
    except Exception as exc:  # the live guardian failed: the answers are malformed, as in a turn
        failure = Malformed(f"guardian failed: {type(exc).__name__}: {exc}"[:300])
        new = {c.value: failure for c in POST_EXECUTION_CONDITIONS}
    new = {str(key): value for key, value in new.items()}
    # The judge is not asked again: on the projection it saw (a replay) its logged answers
    # settle what is in the band again; an edited projection (a probe) would need it asked
    # anew, so there the guardian's answers decide alone.
    judged = judging.answers_split(decision.answers or {})[1]
    replayed = _decide_again(run, turn, decision, new, {} if edits else judged)
    return GuardianReplay(
        True,
        logged_model_version=decision.guardian_model_version,
        model_version=version,
        conditions=_probes(decision.answers, new),
        old_outcome=decision.outcome,
        old_stop_reason=decision.stop_reason,
        new_outcome=replayed.outcome.value,
        new_stop_reason=replayed.stop_reason or "",
        scripted=isinstance(guardian, ScriptedGuardian),
    )


def _decide_again(run: Run, turn: Turn, decision, answers: Mapping, judged: Mapping):
    """`decide` over new answers with everything else as the turn logged it, `judged` (the
    judge's answers) included."""
    policy = mapping.policy_for_run(run)
    earlier = list(
        Turn.objects.filter(run_id=run.pk, index__lt=turn.index, decision__isnull=False)
        .select_related("decision")
        .order_by("-index")[: history_needed(policy)]
    )
    replans = sum(
        _replans_in(steps)
        for steps in Turn.objects.filter(run_id=run.pk, index__lt=turn.index).values_list(
            "steps", flat=True
        )
    )
    reasons = decision.reasons or []
    extra = tuple(_reason_from_json(r) for r in reasons if r.get("source") in LOOP_STEP_SOURCES)
    return decide_judged(
        answers,
        judged,
        policy,
        [mapping.past_turn(t) for t in reversed(earlier)],
        mapping.usage_from_json(turn.usage),
        calls=tuple(decision.call_signatures),
        extra_reasons=extra,
        replans=_replans_before_decide(turn.steps or [], replans),
    )


def turn_probe(*, run: Run, index: int, edits: ProbeEdits, guardian=None) -> GuardianReplay:
    """The counterfactual probe: the guardian asked with the turn's projection edited, and the
    policy's outcome on its answers, against the turn's logged answers and outcome. Raises
    ProbeInputError naming every edit that does not fit the turn. Nothing is written."""
    return guardian_replay(run=run, index=index, edits=edits, guardian=guardian)
