"""Writes on runs: start, cancel, claim a run and advance it one turn (the sweeper, which
finds the runs nobody advances, is runs/sweeps.py).

A run is claimed with a conditional update (a lease) and handed to the turn of its kind:
runs/turns.py for the guarded agent loop, runs/review_rounds.py for the coder ⇄ reviewer
loop. A turn that raises is counted here and the lease released, so one bad run cannot
crash-loop a worker.
"""

import logging
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from escalations.models import Escalation, EscalationStatus
from guardian_core.db import retry_on_conflict
from guardian_core.logs import log_context
from guardian_core.models import PolicyVersion
from guardian_core.policy_validation import run_caps
from runs import sealing
from runs.models import Run, RunStatus, ToolCall, ToolCallStatus
from runs.ports import NO_FLUSH_WAIT
from runs.queue import enqueue_after_commit
from runs.review_rounds import review_round_advance
from runs.turns import RECENT_TURNS_READ, agent_turn_advance
from runs.validation import INLINE_TOOL_KEYS, run_input_problems

logger = logging.getLogger(__name__)

ACTIVE = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)


class RunError(ValueError):
    """A run cannot be started or changed as asked; the message says why."""


# ---- start and cancel -----------------------------------------------------------------------


def run_start(
    *,
    goal: str,
    acceptance_criteria: list[str] | None = None,
    tools: list[str],
    actor: str,
    guardian: str,
    budgets: dict | None = None,
    config: dict | None = None,
    created_by=None,
    policy_version: int | None = None,
    start_key: str = "",
    start_digest: str = "",
) -> Run:
    """Create a run pinned to the active policy version (or version number `policy_version`)
    and enqueue its first turn; an external run's first step is its caller's to propose. A
    budget the run does not state is taken from the version's run caps (a version without a
    cap leaves that budget as it always was). An external run's `tools` may hold definitions
    of its own besides registered names: stored in its config, the names in `tools`.

    Raises RunError naming every problem (runs/validation.py): a run never starts on input it
    can never run with, so nothing sits "running" until the sweeper gives up on it."""
    problems = run_input_problems(
        goal=goal,
        acceptance_criteria=acceptance_criteria,
        tools=tools,
        actor=actor,
        guardian=guardian,
        budgets=budgets,
        config=config,
    )
    if policy_version is None:
        version = PolicyVersion.objects.filter(is_active=True).first()
        if version is None:
            problems.append("policy_version: " + _("no policy version is active"))
    else:
        version = PolicyVersion.objects.filter(number=policy_version).first()
        if version is None:
            problems.append(
                "policy_version: "
                + _("there is no policy version %(number)s") % {"number": policy_version}
            )
    problems += policy_version_problems_for(version)  # a run never starts on an invalid one
    if problems:
        raise RunError("; ".join(problems))
    if actor == "external":
        inline = [
            {key: item[key] for key in INLINE_TOOL_KEYS if key in item}
            for item in tools
            if isinstance(item, dict)
        ]
        tools = [item if isinstance(item, str) else item["name"] for item in tools]
        if inline:
            config = {**(config or {}), "tools": inline}
    # A budget the run does not state is the version's cap, when it has one; stored on the run
    # so its page, its replay and its turns all read the budgets it actually ran under.
    budgets = {**run_caps(version.limits or {}), **(budgets or {})}
    with transaction.atomic():
        run = Run(
            goal=goal,
            acceptance_criteria=list(acceptance_criteria or []),
            tools=list(tools),
            actor=actor,
            guardian=guardian,
            budgets=budgets,
            config=dict(config or {}),
            policy_version=version,
            status=RunStatus.RUNNING,
            created_by=created_by,
            start_key=start_key,
            start_digest=start_digest,
        )
        # Sealed from its start (runs/chain.py): a run whose every decision is later deleted
        # still has a seal that says where its log ends.
        run.seal = sealing.run_seal_value(run, head_turn=None, head="")
        run.save(force_insert=True)
        if actor != "external":  # an external run's loop is its caller's
            enqueue_after_commit(run.pk)
    with log_context(run_id=run.pk):
        logger.info(
            "run %s started (%s, policy version %s)",
            run.pk,
            actor,
            version.number,
            extra={"actor": actor, "guardian": guardian, "policy_version": version.number},
        )
    return run


def run_cancel(*, run_id: int, reason: str = "cancelled", only_running: bool = False) -> bool:
    """Stop a run: no call of it starts after this (runs/ports.py checks the run in the
    statement that starts a call), a call running now is noted as running when the run was
    cancelled, and its open escalation closes as cancelled, with any audit sample still open
    on its turns (nobody need label a cancelled run's turns). `reason` is the stop reason
    recorded (runs/stop_reasons.py); `only_running` leaves a run that waits on a person."""
    statuses = (RunStatus.PENDING, RunStatus.RUNNING) if only_running else ACTIVE
    return retry_on_conflict(lambda: _cancel(run_id, reason, statuses))


def _cancel(run_id: int, reason: str = "cancelled", statuses=ACTIVE) -> bool:
    now = timezone.now()
    with transaction.atomic():
        # The run first, then its escalation: the one lock order (see escalation_resolve).
        changed = Run.objects.filter(pk=run_id, status__in=statuses).update(
            status=RunStatus.CANCELLED, stop_reason=reason, finished_at=now, updated_at=now
        )
        if changed:
            # An open escalation means the run was waiting (active): only a run this cancel
            # stops closes its items; a finished run's audit samples stay to be labelled.
            Escalation.objects.filter(run_id=run_id, status=EscalationStatus.OPEN).update(
                status=EscalationStatus.CANCELLED, resolved_at=now
            )
            # A call that started before the cancel may still be running (a tool in a worker,
            # or an external run's caller): its record says so. One that starts from now on
            # never does: the run's row is what its start statement checks.
            when = timezone.localtime(now).strftime("%Y-%m-%d %H:%M:%S %Z")
            ToolCall.objects.filter(turn__run_id=run_id, status=ToolCallStatus.STARTED).update(
                error=f"running when the run was cancelled at {when}"
            )
            sealing.run_reseal(run_id)
    return bool(changed)


# ---- advance one turn -----------------------------------------------------------------------


def run_advance(*, run_id: int, enqueue_next: bool = True) -> str:
    """Advance a run by one turn. Returns what happened: "skipped" (not claimable: finished,
    waiting, or another worker holds it), "continued", "waiting", "finished" or "failed"
    (an error was recorded; the caller retries later). With `enqueue_next` False a turn that
    continues does not enqueue the next one: the caller advances it itself."""
    with log_context(run_id=run_id):
        return _advance(run_id, enqueue_next)[0]


def _advance(
    run_id: int, enqueue_next: bool, *, held: str = "", slicing: bool = False
) -> tuple[str, str]:
    """One turn, as run_advance; with `held` (a lease token this worker kept from the turn
    before) the run is read under that lease instead of claimed. `slicing`: an agent turn
    that continues without enqueueing the next keeps the lease, renewed by its own write.
    Returns (what happened, the lease token the worker still holds or "")."""
    token = held or uuid.uuid4().hex
    run = _claim(run_id, token, held=bool(held))
    if run is None:
        return "skipped", ""
    if run.actor == "external":  # a stray message: an external run's caller drives it
        Run.objects.filter(pk=run_id, lease_token=token).update(
            lease_token="", lease_expires_at=None
        )
        return "skipped", ""
    try:
        if run.actor == "coder_reviewer":
            return review_round_advance(run, token, enqueue_next=enqueue_next), ""
        keep = slicing and not enqueue_next
        result = agent_turn_advance(run, token, enqueue_next=enqueue_next, keep_lease=keep)
        return result, token if keep and result == "continued" else ""
    except Exception as exc:  # recorded on the run and retried: one bad run cannot crash-loop
        logger.exception("run %s: turn failed", run_id)
        _record_failure(run_id, token, exc)
        return "failed", ""


# The claim and the read of the run in one statement (PostgreSQL): a conditional update that
# returns the row it claimed. Durability: the lease is committed before any work starts.
# The last turns come back in the same statement, as JSON (runs.turns reads them), and with
# an unfinished one (at most one) the calls recorded for it (an external step's started calls,
# which its results complete). So does the id of the active guardian model version of the
# run's adapter (runs.ports.build_guardian): with none active, the turn reads no more.
_CLAIM_SQL = """
WITH claimed AS ({claimed}
)
SELECT claimed.*, (
    SELECT coalesce(json_agg(recent ORDER BY recent.index), '[]'::json) FROM (
        SELECT t.id, t.index, t.proposal, t.usage, t.feedback, t.gate, d.id AS decision_id,
            d.outcome, d.fired, d.call_signatures, d.content_hash,
            CASE WHEN d.id IS NULL THEN (
                SELECT coalesce(json_agg(c ORDER BY c.position), '[]'::json) FROM (
                    SELECT id, position, tool, arguments, intent, risk_class, status,
                        idempotency_key, result, error, started_at, finished_at
                    FROM runs_toolcall WHERE turn_id = t.id
                ) c
            ) END AS calls
        FROM runs_turn t LEFT JOIN runs_decision d ON d.turn_id = t.id
        WHERE t.run_id = claimed.id
        ORDER BY t.index DESC
        LIMIT %s
    ) recent
) AS recent_turns, (
    SELECT v.id FROM guardian_core_guardianmodelversion v
    WHERE v.adapter = claimed.guardian AND v.is_active
    ORDER BY v.id LIMIT 1
) AS claimed_guardian_version_id
FROM claimed
"""
# Its commit does not wait for the WAL flush (runs/ports.py NO_FLUSH_WAIT): a claim a crash of
# PostgreSQL loses was a claim by a process the crash cut off too (every connection dies with
# it), and nothing is told on its strength before a later commit that waits flushes it.
_TAKE_LEASE_SQL = (
    """
    UPDATE runs_run
    SET lease_token = %s, lease_expires_at = %s
    WHERE id = %s AND status = %s AND (lease_expires_at IS NULL OR lease_expires_at < %s)
        {only} """
    + NO_FLUSH_WAIT
    + """
    RETURNING *"""
)
# A lease the worker kept from its turn before (RunSlice): read, not written. Still its own,
# unexpired, on a running run, or the turn does not go on (a cancel, or a sweeper's takeover).
_HELD_LEASE_SQL = """
    SELECT * FROM runs_run
    WHERE lease_token = %s AND lease_expires_at > %s AND id = %s AND status = %s {only}"""


def _claim(
    run_id: int,
    token: str,
    *,
    actor: str | None = None,
    created_by_id: int | None = None,
    held: bool = False,
) -> Run | None:
    """Take the run's lease if it is running and no live lease holds it (and, when given, it
    is of `actor` and was started by user `created_by_id`): the run, or None. `held`: the
    worker kept lease `token` from its turn before; the run is read if it still holds it."""
    now = timezone.now()
    expires = now + timedelta(seconds=settings.GUARDIAN_TURN_LEASE_SECONDS)
    only = {"actor": actor, "created_by_id": created_by_id}
    only = {column: value for column, value in only.items() if value is not None}
    if connection.vendor == "postgresql":
        claimed = (_HELD_LEASE_SQL if held else _TAKE_LEASE_SQL).format(
            only="".join(f"AND {column} = %s " for column in only)
        )
        params = (
            [token, now, run_id, RunStatus.RUNNING]
            if held
            else [token, expires, run_id, RunStatus.RUNNING, now]
        )
        sql = _CLAIM_SQL.format(claimed=claimed)
        return next(iter(Run.objects.raw(sql, [*params, *only.values(), RECENT_TURNS_READ])), None)
    if held:
        return Run.objects.filter(
            pk=run_id, status=RunStatus.RUNNING, lease_token=token, lease_expires_at__gt=now
        ).first()
    claimed = (
        Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, **only)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .update(lease_token=token, lease_expires_at=expires)
    )
    return Run.objects.get(pk=run_id) if claimed else None


def run_advance_slice(*, run_id: int, seconds: float | None = None) -> str:
    """Advance a run turn after turn in this worker while it continues, for up to `seconds`
    (GUARDIAN_TURN_SLICE_SECONDS); the slice's last turn enqueues the next, so other runs get
    the worker in turn. Saves the broker's round trip on every turn but the last of a slice,
    and the lease's own commit on every turn but the first (RunSlice). Each turn is recorded
    and committed as on its own: a worker that dies mid-slice leaves the run to the sweeper
    once its lease expires, like any other crash. Returns the last turn's result."""
    seconds = settings.GUARDIAN_TURN_SLICE_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + seconds
    turns = RunSlice(run_id)
    while True:
        last = time.monotonic() >= deadline
        result = turns.advance(last=last)
        if result != "continued" or last:
            return result


class RunSlice:
    """A worker's time slice on one run: its first turn claims the lease, and each turn that
    continues keeps it, renewed in the statement that writes the turn, so the next turn only
    reads the run under it (no commit of its own). The `last` turn gives the lease back and
    enqueues the next turn; so does any turn that does not continue."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.token = ""  # the lease this worker kept from its turn before, or ""

    def advance(self, *, last: bool) -> str:
        """Advance the run one turn (as run_advance); `last` ends the slice."""
        with log_context(run_id=self.run_id):
            result, self.token = _advance(
                self.run_id, enqueue_next=last, held=self.token, slicing=True
            )
        return result


def _record_failure(run_id: int, token: str, exc: Exception) -> None:
    """Count the failure and release the lease (the sweeper retries); after too many failures
    in a row the run stops, with the error kept for a person to read."""
    message = f"{type(exc).__name__}: {exc}"[:2000]
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, lease_token=token).first()
        if run is None:
            return
        run.failures += 1
        run.last_error = message
        tokens, cost = getattr(exc, "tokens", 0), getattr(exc, "cost", 0.0)
        if tokens or cost:  # a failed model call (e.g. a truncated proposal) was paid for
            unbilled = run.unbilled or {}
            run.unbilled = {
                "tokens": int(unbilled.get("tokens", 0)) + int(tokens),
                "cost": float(unbilled.get("cost", 0.0)) + float(cost),
            }
        run.lease_token = ""
        run.lease_expires_at = None
        if run.failures >= settings.GUARDIAN_MAX_ADVANCE_FAILURES:
            # The safe side: do not act, ask a person.
            run.status = RunStatus.FAILED
            run.stop_reason = "advance_failed"
            run.finished_at = timezone.now()
        run.save()
        if run.status == RunStatus.FAILED:
            sealing.run_reseal(run_id)


def policy_version_problems_for(version: PolicyVersion | None) -> list[str]:
    """Why no run may start on `version`, as run_start reports problems; [] when it may (and
    for None, which run_start reports itself)."""
    if version is None:
        return []
    problems = version.problems()
    if not problems:
        return []
    # Refuse rather than fall back to another version: runs would silently be judged by a
    # policy nobody chose. An admin fixes this by activating a valid version.
    return [
        f"policy_version: the active version {version} is invalid and no run can start on it "
        f"(activate a valid version): " + "; ".join(problems)
    ]
