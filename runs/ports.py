"""The engine's ports for one run: its actor, its guardian and its tools, built from the run's
adapter names and settings, and the tool wrapper that records every call before it runs."""

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, TextField, Value, When
from django.db.models.functions import Concat
from django.utils import timezone

from guardian_core.adapters.scripted import ScriptedActor, ScriptedGuardian
from guardian_core.engine.canonical import canonical_json
from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.judge import Judge
from guardian_core.engine.loop import Actor, Guardian
from guardian_core.engine.reviewer_loop import Agent as ReviewAgent
from guardian_core.engine.tools import StepStopped, Tool
from runs.mapping import policy_for_run
from runs.models import Run, RunStatus, ToolCall, ToolCallStatus, Turn


class AmbiguousCall(RuntimeError):
    """An irreversible call started before a crash and never finished: a person must check."""


def build_actor(run: Run, tools: dict[str, Tool]) -> Actor:
    if run.actor == "scripted":
        # Checked when the run started (runs/validation.py), not again on every turn.
        return ScriptedActor(run.config["scenario"], checked=True)
    if run.actor == "openai":
        from guardian_core.adapters.openai import OpenAIActor

        return OpenAIActor(
            settings.OPENAI_BASE_URL,
            run.config.get("actor_model") or settings.OPENAI_ACTOR_MODEL,
            tools,
            api_key=settings.OPENAI_API_KEY or None,
            prices=settings.GUARDIAN_MODEL_PRICES,
        )
    raise ValueError(f"unknown actor adapter {run.actor!r}")


def build_guardian(run: Run) -> Guardian:
    """The run's guardian: its adapter (base_guardian) as the active guardian model version of
    that adapter, when one is active (a recalibrated or retrained version, guardian_core/
    learning.py). The guardian's `model_version` then names that version, and the loop logs
    it with every decision; an inactive version is never used here."""
    guardian = base_guardian(run)
    if run.guardian == "scripted":  # a script's probabilities are the test's, not a model's
        return guardian
    from runs.guardian_models import UNREAD, guardian_model_version_active, versioned_guardian

    version = guardian_model_version_active(
        adapter=run.guardian, claimed_id=getattr(run, "claimed_guardian_version_id", UNREAD)
    )
    if version is None:
        return guardian
    return versioned_guardian(
        version, guardian, deadline_seconds=settings.GUARDIAN_DEADLINE_SECONDS
    )


def guardian_warm(adapter: str) -> float:
    """Load what the guardian `adapter` asks with (its active model version's, when one is
    active) now, e.g. when a process that serves steps starts, so that its first step is not
    the one that waits for it; the seconds it took, 0 for an adapter with nothing to load."""
    if adapter == "scripted":  # a script's answers are in each run's config
        return 0.0
    guardian = build_guardian(Run(guardian=adapter, config={}))
    # A calibrated version wraps the adapter that loads (a map is all it adds).
    while not hasattr(guardian, "warm") and hasattr(guardian, "inner"):
        guardian = guardian.inner
    warm = getattr(guardian, "warm", None)
    return warm() if callable(warm) else 0.0


def base_guardian(run: Run) -> Guardian:
    """The run's guardian adapter as settings build it. One that takes question text asks the
    wording of the run's pinned policy version; the local and scripted ones ask their own
    fixed questions. Either way the guardian's `question_set_version` is what was asked, and
    the loop logs that."""
    deadline = settings.GUARDIAN_DEADLINE_SECONDS
    if run.guardian == "scripted":
        return ScriptedGuardian(run.config["scenario"], deadline_seconds=deadline, checked=True)
    if run.guardian == "local":
        from guardian_core.adapters.local import LocalGuardian

        return LocalGuardian(deadline_seconds=deadline)
    if run.guardian == "onnx":
        return onnx_guardian(deadline_seconds=deadline)
    if run.guardian == "http":
        from guardian_core.adapters.http import HttpGuardian

        return HttpGuardian(
            settings.GUARDIAN_HTTP_URL,
            api_key=settings.GUARDIAN_HTTP_API_KEY or None,
            timeout_seconds=deadline,
            model_version=settings.GUARDIAN_HTTP_MODEL_VERSION,
            prices=settings.GUARDIAN_MODEL_PRICES,
            **_asked(run),
        )
    if run.guardian == "openai":
        from guardian_core.adapters.openai import OpenAIGuardian

        return OpenAIGuardian(
            settings.OPENAI_BASE_URL,
            settings.OPENAI_GUARDIAN_MODEL,
            api_key=settings.OPENAI_API_KEY or None,
            timeout_seconds=deadline,
            prices=settings.GUARDIAN_MODEL_PRICES,
            **_asked(run),
        )
    raise ValueError(f"unknown guardian adapter {run.guardian!r}")


def onnx_guardian(*, deadline_seconds: float) -> Guardian:
    """The "onnx" guardian: the conditions GUARDIAN_ONNX_MODELS names answered by their model
    directories, the others by the local guardian as it ships (docs/adapters.md, "Bring your
    own model"). A learnt version of it (recalibrated) is one of the "onnx" adapter."""
    from guardian_core.adapters.local import LocalGuardian
    from guardian_core.adapters.onnx_classifier import OnnxGuardian

    if not settings.GUARDIAN_ONNX_MODELS:
        raise ValueError("the onnx guardian needs GUARDIAN_ONNX_MODELS, which is not set")
    return OnnxGuardian(
        settings.GUARDIAN_ONNX_MODELS,
        LocalGuardian(deadline_seconds=deadline_seconds),
        deadline_seconds=deadline_seconds,
        threads=settings.GUARDIAN_ONNX_THREADS,
    )


@dataclass(frozen=True)
class JudgeSetup:
    """The run's second-tier judge, the conditions it may settle and how long it may take."""

    judge: Judge
    conditions: tuple[str, ...]
    deadline_seconds: float


def build_judge(run: Run) -> JudgeSetup | None:
    """The judge the run's pinned policy version names (its `judge` settings, checked when
    the version was saved), asking that version's questions; None when it names none."""
    from guardian_core.policy_validation import JUDGE_TIMEOUT_DEFAULT_SECONDS

    settings_of = _judge_settings(run)
    if not settings_of:
        return None
    if settings_of.get("adapter") != "openai":
        raise ValueError(f"unknown judge adapter {settings_of.get('adapter')!r}")
    from guardian_core.adapters.openai import OpenAIGuardian

    timeout = float(settings_of.get("timeout_seconds") or JUDGE_TIMEOUT_DEFAULT_SECONDS)
    judge = OpenAIGuardian(
        settings.OPENAI_BASE_URL,
        settings_of["model"],
        api_key=settings.OPENAI_API_KEY or None,
        timeout_seconds=timeout,
        prices=settings.GUARDIAN_MODEL_PRICES,
        **_asked(run),
    )
    # The adapter's own deadline cuts a slow reply; the engine's, a little longer, refuses
    # an answer that came late anyway.
    return JudgeSetup(judge, tuple(settings_of.get("conditions") or ()), timeout + 1.0)


# The judge settings per policy version, read once per process like the policy itself (a used
# version is frozen). Each entry keeps the Policy object mapping.policy_for_run gave for it: when
# that cache is forgotten (tests reuse rolled-back ids), the entry no longer matches.
_JUDGE_SETTINGS: dict[int, tuple[object, dict]] = {}


def _judge_settings(run: Run) -> dict:
    policy = policy_for_run(run)
    cached = _JUDGE_SETTINGS.get(run.policy_version_id)
    if cached is not None and cached[0] is policy:
        return cached[1]
    if len(_JUDGE_SETTINGS) > 1024:
        _JUDGE_SETTINGS.clear()
    found = dict(run.policy_version.judge or {})
    _JUDGE_SETTINGS[run.policy_version_id] = (policy, found)
    return found


def _asked(run: Run) -> dict:
    """The pinned policy version's questions, for a guardian that takes question text."""
    return {
        "questions": run.policy_version.question_set,
        "question_set_version": run.policy_version.question_set_version,
    }


def build_review_agents(run: Run) -> tuple[ReviewAgent, ReviewAgent]:
    """The coder and the reviewer of a coder/reviewer run ("coder_reviewer" actor). Scripted
    when run.config holds a "review_loop" script (the demo and tests); otherwise chat models on
    the OpenAI-compatible server, named by run.config "coder_model" / "reviewer_model" or the
    OPENAI_CODER_MODEL / OPENAI_REVIEWER_MODEL settings. Each has a `model` attribute (the
    name asked for) and is closed with close_review_agents()."""
    script = run.config.get("review_loop")
    if isinstance(script, dict):
        from guardian_core.adapters.scripted_chat import ScriptedChatAgent

        return (
            ScriptedChatAgent(script.get("coder", [])),
            ScriptedChatAgent(script.get("reviewer", [])),
        )
    from guardian_core.adapters.openai_chat import OpenAIChatAgent

    models = {
        "coder_model": run.config.get("coder_model") or settings.OPENAI_CODER_MODEL,
        "reviewer_model": run.config.get("reviewer_model") or settings.OPENAI_REVIEWER_MODEL,
    }
    missing = [
        f"{key}: not set in the run's config nor in OPENAI_{key.upper()}"
        for key, model in models.items()
        if not isinstance(model, str) or not model
    ]
    if missing:
        raise ValueError("; ".join(missing))
    coder, reviewer = (
        OpenAIChatAgent(
            settings.OPENAI_BASE_URL,
            model,
            api_key=settings.OPENAI_API_KEY or None,
            prices=settings.GUARDIAN_MODEL_PRICES,
        )
        for model in models.values()
    )
    return coder, reviewer


def close_review_agents(*agents: ReviewAgent) -> None:
    for agent in agents:
        close = getattr(agent, "close", None)
        if close is not None:
            close()


def recording_tools(tools: dict[str, Tool], recorder: "CallRecorder") -> dict[str, Tool]:
    """The run's tools, each wrapped so that its call is recorded by `recorder`."""
    return {
        name: Tool(
            name=tool.name,
            description=tool.description,
            schema=tool.schema,
            risk_class=tool.risk_class,
            func=recorder.wrap(tool),
        )
        for name, tool in tools.items()
    }


@dataclass
class _Row:
    pk: int | None  # None: not written yet (a step kept in memory until its decision)
    turn_id: int | None
    risk_class: str


class _NotLive(Exception):
    """The run was no longer running under the worker's lease: the call did not start."""


@dataclass(frozen=True)
class CallResult:
    """The outcome of a call, written with the decision: one another loop ran (an external
    run's), or one of this turn whose result may wait for the turn's commit."""

    id: int
    status: str
    result: str | None
    error: str


class CallRecorder:
    """Records the calls of one turn, with no more commits than the rules need
    (README, "What a turn commits"):

    * Each call that runs is recorded as started before it runs, in a commit of its own; the
      first one also writes the turn begun in memory (runs/recording.py turn_unwritten). A
      crash leaves a call started and never finished, which a retry sees, and people see what
      is running meanwhile; no lock is held while a tool runs. A write's "started" is flushed
      before it runs; a read's is not waited for (PostgreSQL's synchronous_commit off for
      that transaction): its loss in a crash only hides a read that runs again.
    * A call that needs approval (irreversible, regulated) is recorded as done in a commit of
      its own right after, so a retry finds it done rather than ambiguous and asks nobody.
      Any other call's result is written with the decision (`unwritten`): a crash before it
      leaves the call started, and a retry runs it again under the same key, as the rule
      below allows.
    * A turn in which no call runs is written whole with its decision (`new_rows`).
    At the turn's end `finish` adds the calls that never ran, in one insert.

    A key already done returns its stored result instead of running again. A key found started
    but never finished (the worker died) is ambiguous: a read-only or reversible call is run
    again with the same key; an irreversible or regulated one is never retried blindly: only
    a key in `rerun_keys` (a person said it did not go through and asked for it) runs again.
    A `fresh` turn (begun by this worker, not a retry) has no earlier rows to look up.

    A call starts only while the run is running under the worker's lease `token`, checked in
    the statement that records it as started: after a cancel (or a lost lease) it does not
    start, and StepStopped ends the step there (runs/recording.py turn_stopped records it so).
    """

    def __init__(
        self,
        *,
        turn: Turn,
        calls_by_key,  # runs.turns._CallsByKey: key -> (position, intent)
        rerun_keys: frozenset[str] = frozenset(),
        fresh: bool = False,
        token: str = "",
    ) -> None:
        self.turn = turn
        self.token = token  # the worker's lease: a call starts only while the run is under it
        self.calls_by_key = calls_by_key
        self.rerun_keys = rerun_keys
        self.fresh = fresh
        self.rows: dict[int, _Row] = {}  # by position: the rows this turn's calls have
        # By position: the sealed columns (runs/chain.py) of the rows this recorder wrote on
        # this turn, as written, so the decision seals them without reading them back.
        self.values: dict[int, dict] = {}
        # The class each call runs under (the gate's, which the declared class floors), by
        # position (`plan`).
        self.classes: dict[int, RiskClass] = {}
        # Results of calls recorded as started whose "done" waits for the decision, by row id.
        self.unwritten: dict[int, CallResult] = {}

    def plan(self, prepared) -> None:
        """Before any call of the step runs (the engine's `before_calls`): note the class each
        runnable call runs under."""
        # A step with a runnable call was gated (the engine gates every valid step).
        gated = {c.position: c.effective for c in (prepared.gate.calls if prepared.gate else ())}
        self.classes = {position: RiskClass(gated[position]) for position in prepared.runnable}

    @property
    def reads_only(self) -> bool:
        """Whether every call that may run is read-only (or none may run): what the turn
        changes outside Guardian is nothing."""
        return all(risk == RiskClass.READ_ONLY for risk in self.classes.values())

    def wrap(self, tool: Tool) -> Callable[..., object]:
        def call(arguments: dict, *, idempotency_key: str) -> object:
            return self._call(tool, arguments, idempotency_key)

        return call

    def _call(self, tool: Tool, arguments: dict, key: str) -> object:
        position, intent = self.calls_by_key.lookup(key, tool.name, arguments)
        existing = None
        if not self.fresh or key in self.rerun_keys:
            existing = ToolCall.objects.filter(idempotency_key=key).first()
        if existing is not None:
            self.rows[position] = _Row(existing.pk, existing.turn_id, existing.risk_class)
            if existing.status == ToolCallStatus.DONE:
                return existing.result
            # A re-run is allowed once: the verdict left the call failed, and a re-run that
            # crashed in turn leaves it started, which is ambiguous again.
            rerun = key in self.rerun_keys and existing.status == ToolCallStatus.FAILED
            if RiskClass(tool.risk_class).needs_approval and not rerun:
                ToolCall.objects.filter(pk=existing.pk).update(status=ToolCallStatus.AMBIGUOUS)
                raise AmbiguousCall(
                    f"{tool.name} {arguments} started at {existing.started_at:%Y-%m-%d %H:%M:%S} "
                    "and was never recorded as done: did it go through? It is not retried."
                )
            if not self._start_again(existing.pk):
                self._stopped(tool)
        else:
            pk = self._start_new(tool, arguments, key, position, intent)
            if pk is None:
                self._stopped(tool)
            existing = ToolCall(pk=pk, turn_id=self.turn.pk)
            self.rows[position] = _Row(pk, self.turn.pk, tool.risk_class)
            self.values[position] = {
                "position": position,
                "tool": tool.name,
                # A copy: a tool that changes its arguments changes nothing written.
                "arguments": copy.deepcopy(arguments),
                "intent": intent,
                "risk_class": str(tool.risk_class),
                "idempotency_key": key,
                "status": ToolCallStatus.STARTED.value,
                "result": None,
                "error": "",
            }
        written = self.values.get(position) if existing.turn_id == self.turn.pk else None
        try:
            result = tool.func(arguments, idempotency_key=key)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
            ToolCall.objects.filter(pk=existing.pk).update(
                status=ToolCallStatus.FAILED,
                # A cancel's note, written while the call ran, stays first.
                # The texts typed as the column is: a plain Value is a CharField, and Concat
                # refuses to mix it with the TextField column.
                error=Case(
                    When(error="", then=Value(error, output_field=TextField())),
                    default=Concat(
                        F("error"),
                        Value("\n", output_field=TextField()),
                        Value(error, output_field=TextField()),
                        output_field=TextField(),
                    ),
                ),
                finished_at=timezone.now(),
            )
            # The error as stored may carry a cancel's note: the seal reads the row back.
            self.values.pop(position, None)
            raise
        text = result if isinstance(result, str) else canonical_json(result)
        risk = self.classes.get(position) or RiskClass(tool.risk_class)
        if written is not None and not risk.needs_approval:
            # Its "started" is durable; its result lands with the decision (see the class).
            self.unwritten[existing.pk] = CallResult(existing.pk, ToolCallStatus.DONE, text, "")
        else:
            ToolCall.objects.filter(pk=existing.pk).update(
                status=ToolCallStatus.DONE, result=text, finished_at=timezone.now()
            )
        if written is not None:
            written.update(status=ToolCallStatus.DONE.value, result=text)
        return text

    def new_rows(self, record) -> list[ToolCall]:
        """Every call of a turn not written yet (no call of it ran) as the row it is written
        as, with the decision, as `finish` would write it (invalid, held, not run). Their
        sealed columns are noted too (`sealed_calls`)."""
        gated = {c.position: c.effective for c in (record.gate.calls if record.gate else ())}
        rows = []
        for call in record.calls:
            values = self.values.get(call.position)
            if values is None:
                risk = gated.get(call.position) or call.declared_risk or RiskClass.READ_ONLY
                values = {
                    "position": call.position,
                    "tool": call.tool,
                    "arguments": call.arguments,
                    "intent": call.intent,
                    "risk_class": str(risk),
                    "idempotency_key": call.idempotency_key,
                    "status": _STORED_STATUS[call.status].value,
                    "result": call.result,
                    "error": call.error or "\n".join(call.problems),
                }
                self.values[call.position] = values
                self.rows[call.position] = _Row(None, None, values["risk_class"])
            rows.append(ToolCall(turn=self.turn, **values))
        return rows

    def write_unwritten(self) -> None:
        """Write the results still waiting for the decision (a turn ended without the
        statement that writes them: cut short by a cancel, or written on the ORM path)."""
        now = timezone.now()
        for pk, outcome in self.unwritten.items():
            ToolCall.objects.filter(pk=pk).update(
                status=outcome.status, result=outcome.result, finished_at=now
            )
        self.unwritten = {}

    def sealed_calls(self, record) -> list[dict] | None:
        """The sealed columns of every row of this turn's calls, as written, when this
        recorder wrote them all and `finish` has nothing to add (the common turn); None when
        they must be read back."""
        if not self.nothing_to_finish(record) or set(self.values) != set(self.rows):
            return None
        return [self.values[call.position] for call in record.calls]

    def _start_new(
        self, tool: Tool, arguments: dict, key: str, position: int, intent: str
    ) -> int | None:
        """Record the call as started, in one statement that checks the run is still running
        under this worker's lease: the new row's id, or None (the call must not start)."""
        params = [
            self.turn.pk,
            position,
            tool.name,
            canonical_json(arguments),
            intent,
            str(tool.risk_class.value),
            ToolCallStatus.STARTED,
            key,
            timezone.now(),
        ]
        flush = (self.classes.get(position) or RiskClass(tool.risk_class)) != RiskClass.READ_ONLY
        begins = self.turn.pk is None
        if not begins and flush:
            return self._insert_started(params)
        # One commit: the turn begun in memory, written with its first call's start; a read's
        # start not waited for (see the class). One statement on PostgreSQL.
        if connection.vendor == "postgresql":
            return self._start_in_one_statement(params, begins=begins, flush=flush)
        try:
            with transaction.atomic():
                if begins:
                    self.turn.save(force_insert=True)
                    params[0] = self.turn.pk
                pk = self._insert_started(params)
                if pk is None:
                    raise _NotLive
        except _NotLive:
            if begins:  # rolled back: the turn is in memory only, as before
                self.turn.pk, self.turn._state.adding = None, True
            return None
        return pk

    def _start_in_one_statement(self, params: list, *, begins: bool, flush: bool) -> int | None:
        """_start_new on PostgreSQL: the turn (when it `begins`) and the call started in one
        statement, which without `flush` does not wait for its WAL flush."""
        fence = "" if flush else NO_FLUSH_WAIT
        if begins:
            turn = [
                self.turn.index,
                json.dumps(self.turn.proposal),
                self.turn.started_at,
            ]
            sql = _START_WITH_TURN_SQL.format(no_flush_wait=fence)
            values = [self.turn.run_id, RunStatus.RUNNING, self.token, *turn, *params[1:]]
        else:
            sql = _START_NEW_SQL.format(lock=fence + " FOR SHARE", json="%s::jsonb")
            values = [self.turn.run_id, RunStatus.RUNNING, self.token, *params]
        with connection.cursor() as cursor:
            cursor.execute(sql, values)
            row = cursor.fetchone()
        if row is None:
            return None
        if begins:
            self.turn.pk = row[1]
            self.turn._state.adding, self.turn._state.db = False, connection.alias
        return row[0]

    def _insert_started(self, params: list) -> int | None:
        sql = _START_NEW_SQL.format(**_vendor())
        with connection.cursor() as cursor:
            cursor.execute(sql, [self.turn.run_id, RunStatus.RUNNING, self.token, *params])
            row = cursor.fetchone()
        return row[0] if row else None

    def _start_again(self, pk: int) -> bool:
        """Record an existing call as started again (a re-run under its key), in one statement
        that checks the run is still running under this worker's lease."""
        sql = _START_AGAIN_SQL.format(**_vendor())
        with connection.cursor() as cursor:
            cursor.execute(
                sql,
                [
                    self.turn.run_id,
                    RunStatus.RUNNING,
                    self.token,
                    ToolCallStatus.STARTED,
                    timezone.now(),
                    pk,
                ],
            )
            # Counted by RETURNING: SQLite's driver gives no rowcount for a WITH statement.
            return cursor.fetchone() is not None

    def _stopped(self, tool: Tool) -> None:
        """The call may not start: say why, as the engine's StepStopped (nothing more of the
        step runs, and the caller records the turn as the cancel left it)."""
        status = Run.objects.filter(pk=self.turn.run_id).values_list("status", flat=True).first()
        if status == RunStatus.RUNNING:
            raise StepStopped(f"{tool.name} not started: the run's lease was lost")
        raise StepStopped(f"{tool.name} not started: the run was {status}")

    def nothing_to_finish(self, record) -> bool:
        """Whether every call of the step already has its row, with its class: then `finish`
        has nothing to write (the common turn, whose calls all ran as declared)."""
        if not self.fresh:
            return False
        gated = {c.position: c.effective.value for c in (record.gate.calls if record.gate else ())}
        for call in record.calls:
            row = self.rows.get(call.position)
            risk = gated.get(call.position) or (call.declared_risk or "read_only")
            if row is None or row.turn_id != self.turn.pk or row.risk_class != risk:
                return False
        return True

    def finish(self, record) -> None:
        """Bring every call of the step into the log (inside the turn's transaction): the
        calls that never ran get their rows, and a call the gate classed above its tool's
        declared class gets that class. A call re-run under an earlier turn's key is recorded
        on that turn's row (it is the same call); this turn's row points to it."""
        rows = dict(self.rows)
        if not self.fresh:  # a retried turn: an earlier attempt may have left rows
            for row in ToolCall.objects.filter(turn=self.turn).only("id", "position", "risk_class"):
                rows.setdefault(row.position, _Row(row.pk, self.turn.pk, row.risk_class))
        gated = {c.position: c.effective.value for c in (record.gate.calls if record.gate else ())}
        new = []
        for call in record.calls:
            risk = gated.get(call.position) or (call.declared_risk or "read_only")
            row = rows.get(call.position)
            if row is not None and row.turn_id == self.turn.pk:
                if row.risk_class != risk:
                    ToolCall.objects.filter(pk=row.pk).update(risk_class=risk)
                continue
            error = call.error or "\n".join(call.problems)
            key = call.idempotency_key
            if row is not None:  # re-run on an earlier turn's row
                error = f"re-run of that call with its idempotency key; {error}".strip("; ")
                key = None
            new.append(
                ToolCall(
                    turn=self.turn,
                    position=call.position,
                    tool=call.tool,
                    arguments=call.arguments,
                    intent=call.intent,
                    risk_class=risk,
                    status=_STORED_STATUS[call.status],
                    idempotency_key=key,
                    result=call.result,
                    error=error,
                )
            )
        if new:
            ToolCall.objects.bulk_create(new)


# A call is recorded as started only while its run is running under the worker's lease, in the
# statement that records it. On PostgreSQL the run's row is read FOR SHARE: a cancel in flight
# holds that row, so the statement waits for it to commit, reads the row again and starts
# nothing; a cancel that comes later finds the call started and notes it (runs/services.py).
# SQLite has one writer at a time: the statement sees a cancel committed or not yet begun.
_LIVE_RUN = """
WITH live AS (
    SELECT id FROM runs_run WHERE id = %s AND status = %s AND lease_token = %s {lock}
)
"""
_START_NEW_SQL = (
    _LIVE_RUN
    + """INSERT INTO runs_toolcall (
    turn_id, position, tool, arguments, intent, risk_class, status, idempotency_key, result,
    error, started_at
)
SELECT %s, %s, %s, {json}, %s, %s, %s, %s, NULL, '', %s FROM live
RETURNING id
"""
)
_START_AGAIN_SQL = (
    _LIVE_RUN
    + """UPDATE runs_toolcall SET status = %s, started_at = %s, error = ''
WHERE id = %s AND EXISTS (SELECT 1 FROM live)
RETURNING id
"""
)


# A condition that is always true and, evaluated for the row that lets the statement write,
# makes its transaction commit without waiting for the WAL flush (set_config's third argument:
# for this transaction only; PostgreSQL, SQLite has no such setting). Only for a commit whose
# loss in a crash repeats work nobody outside saw; each user says why. A later commit that
# waits flushes it too: the WAL is written in order. In the statement itself, because a
# statement of its own would cost a round trip and a transaction block.
NO_FLUSH_WAIT = "AND set_config('synchronous_commit', 'off', true) = 'off'"
# The turn begun in memory and its first call started, in one statement (PostgreSQL).
_START_WITH_TURN_SQL = """
WITH live AS (
    SELECT id FROM runs_run WHERE id = %s AND status = %s AND lease_token = %s
        {no_flush_wait} FOR SHARE
), turn AS (
    INSERT INTO runs_turn (
        run_id, index, state_hash, proposal, projection, risk_projections, steps, state,
        usage, feedback, gate, timings, started_at
    )
    SELECT live.id, %s, '', %s::jsonb, '{{}}', '[]', '[]', '{{}}', '{{}}', '[]', '{{}}', '{{}}', %s
    FROM live
    RETURNING id
)
INSERT INTO runs_toolcall (
    turn_id, position, tool, arguments, intent, risk_class, status, idempotency_key, result,
    error, started_at
)
SELECT turn.id, %s, %s, %s::jsonb, %s, %s, %s, %s, NULL, '', %s FROM turn
RETURNING id, turn_id
"""


def _vendor() -> dict[str, str]:
    if connection.vendor == "postgresql":
        return {"lock": "FOR SHARE", "json": "%s::jsonb"}
    return {"lock": "", "json": "%s"}


_STORED_STATUS = {
    "invalid": ToolCallStatus.INVALID,
    "held": ToolCallStatus.HELD,
    "not_approved": ToolCallStatus.REJECTED,
    "done": ToolCallStatus.DONE,
    "failed": ToolCallStatus.FAILED,
    "not_run": ToolCallStatus.PROPOSED,
}
