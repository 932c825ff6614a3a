"""`make bench`: the same loop in LangGraph, checkpointed by PostgresSaver on the same database.

Two ways to run it, each on a thread of its own, both with `durability="sync"` (every step's
checkpoint is written before the next step runs, the closest LangGraph comes to Guardian's
"recorded before it runs"):

    loop       one `invoke` runs every round, the graph going from decide back to actor: the
               fair peer of a worker's in-slice turn, which also goes on from what it holds.
               Each round is timed from its actor step to the next round's (a hook in the
               actor node stamps time.perf_counter), checkpoints included.
    per round  one `invoke` per round, so each round loads the thread's checkpoint first: the
               slow mode, the peer of a turn that starts from the database (the first turn of
               a worker's slice).

A round does what a Guardian turn does with the scripted actor and guardian, minus the guard's
own bookkeeping:

    actor     proposes the script's next read_order call (a different order each round)
    tool      runs runs.demo_tools.read_order, the function a Guardian turn runs
    guardian  returns fixed calm answers (no model time, like the scripted guardian)
    decide    calls guardian_core.engine.policy.decide with the last few rounds' outcomes

The state grows like Guardian's: every round appends its history item (the idiomatic
LangGraph way, a list channel with an adding reducer). Each mode's checkpointer tables live
in a schema of its own (`bench_langgraph_*`), dropped at the end. Per round at the windows'
rounds the section also counts statements (psycopg, on the checkpointer's connection) and
what PostgreSQL counted: commits, rows written, WAL writes and syncs (bench/pg_counts.py).
Needs the `bench` extra (pip install -e '.[bench]') and PostgreSQL.
Run alone: .venv/bin/python -m bench.langgraph_round
"""

import operator
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Annotated, TypedDict

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from bench import pg_counts  # noqa: E402
from bench.report import Report  # noqa: E402
from guardian_core.engine.conditions import Condition  # noqa: E402
from guardian_core.engine.policy import (  # noqa: E402
    Outcome,
    PastTurn,
    Usage,
    decide,
    history_needed,
)
from guardian_core.engine.thresholds import Budgets, default_policy  # noqa: E402
from guardian_core.engine.tools import call_signature  # noqa: E402

INSTALL_HINT = "pip install -e '.[bench]'"
# What the scripted guardian answers when its script says nothing (adapters/scripted.py).
CALM = {
    "integrity": 0.01,
    "infeasible": 0.02,
    "goal_reached": 0.05,
    "drift": {"0": 0.0, "1": 0.0, "2": 0.05, "3": 0.25, "4": 0.7},
    "stagnation": 0.05,
}
STEPS_PER_ROUND = 4  # actor, tool, guardian, decide: the loop's recursion limit counts steps


def unavailable() -> str | None:
    """Why this section cannot run here, or None when it can."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return f"needs PostgreSQL (the database is {connection.vendor}; set DATABASE_URL)"
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        import langgraph.graph  # noqa: F401
    except ImportError:
        return f"langgraph is not installed: {INSTALL_HINT}"
    return None


class RoundState(TypedDict, total=False):
    turn: int
    pending: dict
    results: list[str]
    answers: dict
    outcome: str
    history: Annotated[list[dict], operator.add]  # each round appends its item, as Guardian's


def build_graph(
    checkpointer,
    *,
    turns: int,
    loop: bool = False,
    on_round: Callable[[int], None] | None = None,
):
    """The round's graph; with `loop`, decide goes back to actor until `turns` rounds are done
    and `on_round(turn)` is called as each round's actor step starts."""
    from langgraph.graph import END, START, StateGraph

    from runs.demo_tools import read_order

    policy = default_policy(budgets=Budgets(max_turns=turns + 5))
    # The rounds decide reads: the hysteresis and exact-repeat windows, this round excluded.
    window = history_needed(policy)

    def actor(state: RoundState) -> dict:
        turn = state["turn"]
        if on_round is not None:
            on_round(turn)
        call = {"tool": "read_order", "arguments": {"order_id": f"ord_{turn:05d}"}}
        return {"pending": call}

    def tool(state: RoundState) -> dict:
        call = state["pending"]
        key = f"bench:{state['turn']}:0"
        return {"results": [read_order(call["arguments"], idempotency_key=key)]}

    def guardian(state: RoundState) -> dict:
        return {"answers": dict(CALM)}

    def decide_node(state: RoundState) -> dict:
        call = state["pending"]
        signature = call_signature(call["tool"], call["arguments"])
        past = [
            PastTurn(
                Outcome(item["outcome"]),
                frozenset(map(Condition, item["fired"])),
                tuple(item["calls"]),
            )
            for item in state.get("history", [])[-window:]
        ]
        decision = decide(
            state["answers"],
            policy,
            past,
            Usage(turns=state["turn"] + 1),
            calls=(signature,),
        )
        item = {
            "turn": state["turn"],
            "summary": f"turn {state['turn']}: read_order done",
            "outcome": decision.outcome.value,
            "fired": sorted(c.value for c in decision.fired),
            "calls": [signature],
        }
        update = {"outcome": decision.outcome.value, "history": [item]}
        if loop:  # one invoke: the state carries the round on (per round, the input sets it)
            update["turn"] = state["turn"] + 1
        return update

    graph = StateGraph(RoundState)
    graph.add_node("actor", actor)
    graph.add_node("tool", tool)
    graph.add_node("guardian", guardian)
    graph.add_node("decide", decide_node)
    graph.add_edge(START, "actor")
    graph.add_edge("actor", "tool")
    graph.add_edge("tool", "guardian")
    graph.add_edge("guardian", "decide")
    if loop:
        graph.add_conditional_edges(
            "decide",
            lambda state: "actor" if state["turn"] < turns else END,
            ["actor", END],
        )
    else:
        graph.add_edge("decide", END)
    return graph.compile(checkpointer=checkpointer)


def _counting_connection(conninfo: str):
    """A psycopg connection that counts the statements sent through it (executemany counts
    one per parameter set: each is a statement the server runs)."""
    from psycopg import Connection, Cursor
    from psycopg.rows import dict_row

    class CountingCursor(Cursor):
        def execute(self, query, params=None, **kwargs):
            self.connection.statements += 1
            return super().execute(query, params, **kwargs)

        def executemany(self, query, params_seq, **kwargs):
            params_seq = list(params_seq)
            self.connection.statements += len(params_seq)
            return super().executemany(query, params_seq, **kwargs)

    class CountingConnection(Connection):
        statements = 0

    # The settings PostgresSaver documents for a connection of one's own.
    return CountingConnection.connect(
        conninfo,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        cursor_factory=CountingCursor,
    )


class Contender:
    """One LangGraph thread on PostgresSaver with its own connection and schema.

    Use as a context manager: it opens its connection, creates the checkpointer's tables in a
    schema of its own and drops that schema on the way out. `advance_to(n)` runs rounds until
    n are done; `times[i]` is round i's milliseconds, `tally` its counts (None without an
    observer)."""

    name = ""  # in the figures' names
    short = ""  # in its rounds' counts and the ratios
    schema = ""
    loop = False

    def __init__(self, *, turns: int, observer: pg_counts.Observer | None = None) -> None:
        self.turns = turns
        self.times: dict[int, float] = {}
        self.observer = observer
        self.tally: pg_counts.Tally | None = None

    def __enter__(self):
        from langgraph.checkpoint.postgres import PostgresSaver

        self.connection = _counting_connection(pg_counts.conninfo())
        self.connection.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        self.connection.execute(f"CREATE SCHEMA {self.schema}")
        self.connection.execute(f"SET search_path TO {self.schema}")
        self.saver = PostgresSaver(self.connection)
        self.saver.setup()
        self.graph = build_graph(
            self.saver, turns=self.turns, loop=self.loop, on_round=self._on_round
        )
        self.config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex}"}}
        if self.observer is not None:
            from bench.durable_turn import WINDOWS

            counted = {i for window in WINDOWS.values() for i in window}
            self.tally = pg_counts.Tally(
                self.observer,
                self._flush,
                counted,
                statements=lambda: self.connection.statements,
            )
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.connection.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        finally:
            self.connection.close()

    def _flush(self) -> None:
        with self.saver.lock:  # the checkpointer's own lock on its connection
            self.connection.execute(pg_counts.FLUSH)

    def _on_round(self, turn: int) -> None:
        pass

    def advance_to(self, rounds: int) -> None:
        raise NotImplementedError

    def median(self, window: Iterable[int]) -> float:
        return statistics.median(self.times[i] for i in window)


class PerRound(Contender):
    """One `invoke` per round: each loads the thread's checkpoint, runs a round, saves."""

    name = "LangGraph one invoke per round"
    short = "per-invoke"
    schema = "bench_langgraph_per_round"

    def __init__(self, *, turns: int, observer: pg_counts.Observer | None = None) -> None:
        super().__init__(turns=turns, observer=observer)
        self.done = 0

    def advance_to(self, rounds: int) -> None:
        while self.done < min(rounds, self.turns):
            index = self.done
            if self.tally is not None:
                self.tally.before(index)
            start = time.perf_counter()
            out = self.graph.invoke({"turn": index}, self.config, durability="sync")
            self.times[index] = (time.perf_counter() - start) * 1000
            if self.tally is not None:
                self.tally.after(index)
            if out["outcome"] != "continue":
                raise RuntimeError(f"LangGraph round {index} decided {out['outcome']!r}")
            if len(out["history"]) != index + 1:
                raise RuntimeError(f"LangGraph round {index} lost its history")
            self.done += 1
        if self.tally is not None:
            self.tally.settle()


class _Stopped(Exception):
    """The bench is over before the loop: the actor step ends the invoke."""


class Loop(Contender):
    """One `invoke` for every round, on a thread of its own that pauses between blocks.

    The loop cannot return to the caller mid-invoke, so it runs on a thread and the actor
    step's hook hands over: when the rounds asked for are done it waits until `advance_to`
    asks for more. Only one side runs at a time, so the contenders still alternate in blocks.
    The wait, like the counting, falls outside the rounds' times."""

    name = "LangGraph loop (one invoke)"
    short = "loop"
    schema = "bench_langgraph_loop"
    loop = True

    def __init__(self, *, turns: int, observer: pg_counts.Observer | None = None) -> None:
        super().__init__(turns=turns, observer=observer)
        self.changed = threading.Condition()
        self.allowed = 0  # rounds the loop may run before it next waits
        self.waiting_at: int | None = None  # the round it waits to start
        self.finished = False
        self.stopped = False
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.starts: dict[int, float] = {}

    def __enter__(self):
        super().__enter__()
        self.config["recursion_limit"] = STEPS_PER_ROUND * self.turns + 10
        return self

    def __exit__(self, *exc) -> None:
        if self.thread is not None and self.thread.is_alive():
            with self.changed:
                self.stopped = True
                self.changed.notify_all()
            self.thread.join()
        super().__exit__(*exc)

    def _end_round(self, index: int, ended: float) -> None:
        self.times[index] = (ended - self.starts[index]) * 1000
        if self.tally is not None:
            self.tally.after(index)

    def _on_round(self, turn: int) -> None:
        """The actor step of round `turn` starts: close the last round, wait for leave to go
        on when the block is done, open this round."""
        if turn > 0:
            self._end_round(turn - 1, time.perf_counter())
        if turn >= self.allowed:
            if self.tally is not None:
                self.tally.settle()
            with self.changed:
                self.waiting_at = turn
                self.changed.notify_all()
                while turn >= self.allowed and not self.stopped:
                    self.changed.wait()
                self.waiting_at = None
        if self.stopped:
            raise _Stopped
        if self.tally is not None:
            self.tally.before(turn)
        self.starts[turn] = time.perf_counter()

    def _run(self) -> None:
        try:
            out = self.graph.invoke({"turn": 0}, self.config, durability="sync")
            self._end_round(self.turns - 1, time.perf_counter())
            if self.tally is not None:
                self.tally.settle()
            if out["outcome"] != "continue":
                raise RuntimeError(f"LangGraph's last round decided {out['outcome']!r}")
            if len(out["history"]) != self.turns:
                raise RuntimeError("LangGraph's loop lost its history")
        except _Stopped:
            pass
        except BaseException as exc:  # handed to the caller of advance_to, raised there
            self.error = exc
        finally:
            with self.changed:
                self.finished = True
                self.changed.notify_all()

    def advance_to(self, rounds: int) -> None:
        target = min(rounds, self.turns)
        with self.changed:
            self.allowed = max(self.allowed, target)
            self.changed.notify_all()
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="langgraph-loop", daemon=True)
            self.thread.start()
        with self.changed:
            while not self.finished and not (
                self.waiting_at is not None and self.waiting_at >= target
            ):
                self.changed.wait()
        if self.error is not None:
            raise RuntimeError(f"LangGraph's loop failed: {self.error!r}") from self.error
        if self.finished and len(self.times) < target:
            raise RuntimeError(f"LangGraph's loop stopped after {len(self.times)} rounds")


class Contenders:
    """Both modes, each with its own connection and schema, and the counters' observer."""

    def __init__(self, *, turns: int) -> None:
        self.turns = turns

    def __enter__(self) -> "Contenders":
        with ExitStack() as stack:
            self.observer = pg_counts.observer()
            if self.observer is not None:
                stack.callback(self.observer.close)
            self.loop = stack.enter_context(Loop(turns=self.turns, observer=self.observer))
            self.per_round = stack.enter_context(PerRound(turns=self.turns, observer=self.observer))
            self.stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self.stack.__exit__(*exc)

    @property
    def modes(self) -> tuple[Contender, Contender]:
        return (self.loop, self.per_round)

    def advance_to(self, rounds: int) -> None:
        """Each mode's rounds up to `rounds`, one mode after the other."""
        for mode in self.modes:
            mode.advance_to(rounds)


def report_rounds(report: Report, contenders: Contenders, guardian) -> None:
    """Each mode's medians and counts per window (and its median over every round) and, with
    Guardian's figures (a bench.durable_turn.Figures), Guardian / LangGraph for both modes."""
    from bench.durable_turn import WHOLE, WINDOWS

    if contenders.observer is not None:
        report.note(contenders.observer.settings_note(pg_counts.django_setting))
    else:
        report.note("not counting statements, commits or WAL (BENCH_PG_COUNTS=off)")
    for mode in contenders.modes:
        medians = {label: mode.median(window) for label, window in WINDOWS.items()}
        for label, window in WINDOWS.items():
            extra = "durability=sync" + (", the slow mode" if mode is contenders.per_round else "")
            report.add(f"{mode.name}, {label}", medians[label], "ms", extra=extra)
            if mode.tally is not None:
                pg_counts.add_counts(
                    report,
                    f"  {mode.short} round, {label}",
                    mode.tally.median(window),
                    statements=[mode.tally.round_statements(i) for i in window],
                )
        first, last = medians.values()
        labels = list(medians)
        report.ratio(f"  {mode.short}, {labels[1]} / {labels[0]}", last / first)
        for label, window in WHOLE.items():
            report.add(f"{mode.name}, {label}", mode.median(window), "ms")
    if guardian is None:
        return
    for label, window in {**WINDOWS, **WHOLE}.items():
        loop = contenders.loop.median(window)
        per_invoke = contenders.per_round.median(window)
        in_slice = guardian.medians[label]
        publishing = guardian.medians[f"{label}, publishing"]
        report.ratio(f"Guardian in-slice / LangGraph loop, {label}", in_slice / loop)
        report.ratio(f"Guardian in-slice / LangGraph per-invoke, {label}", in_slice / per_invoke)
        report.ratio(
            f"  Guardian publishing / LangGraph per-invoke, {label}", publishing / per_invoke
        )
        if label in WHOLE and guardian.write_median is not None:
            report.ratio(
                f"Guardian write in-slice / LangGraph loop, {label}", guardian.write_median / loop
            )
        if label in guardian.counts and contenders.observer is not None:
            sides = [("Guardian in-slice", guardian.counts[label], guardian.statements[label])]
            for mode in contenders.modes:
                rounds = [mode.tally.round_statements(i) for i in window]
                sides.append((f"LangGraph {mode.short}", mode.tally.median(window), rounds))
            report.note(
                f"  per round, {label}: "
                + "; ".join(
                    f"{name} {statistics.median(sent):g} statements, {c.commits:g} commits, "
                    f"{c.wal_writes:g} WAL writes, {c.wal_syncs:g} WAL syncs"
                    for name, c, sent in sides
                )
            )


def measure_alone(report: Report, why_not: str | None) -> None:
    """LangGraph without Guardian alongside (its section was skipped): medians, no ratio."""
    from bench.durable_turn import TURNS

    if why_not:
        report.skip(why_not)
        return
    with Contenders(turns=TURNS) as contenders:
        contenders.advance_to(TURNS)
        report_rounds(report, contenders, None)


def main() -> None:
    report = Report("langgraph")
    measure_alone(report, unavailable())
    report.finish()


if __name__ == "__main__":
    main()
