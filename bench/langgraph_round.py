"""`make bench`: the same loop in LangGraph, checkpointed by PostgresSaver on the same database.

One round is one `invoke` on one thread, so each round loads the thread's checkpoint and saves
its own (`durability="sync"`: every step's checkpoint is written before the next step runs, the
closest LangGraph comes to Guardian's "recorded before it runs"). The graph does per round what
a Guardian turn does with the scripted actor and guardian, minus the guard's own bookkeeping:

    actor     proposes the script's next read_order call (a different order each round)
    tool      runs runs.demo_tools.read_order, the function a Guardian turn runs
    guardian  returns fixed calm answers (no model time, like the scripted guardian)
    decide    calls guardian_core.engine.policy.decide with the last few rounds' outcomes

The state grows like Guardian's: every round appends its history item (the idiomatic
LangGraph way, a list channel with an adding reducer). PostgresSaver stores a channel's value
whole for each new version, so the history is written again in full every round and a late
round costs more than an early one; Guardian stores each turn's delta instead. The
checkpointer's tables live in a schema of their own (`bench_langgraph`), dropped at the end.
Needs the `bench` extra (pip install -e '.[bench]') and PostgreSQL.
Run alone: .venv/bin/python -m bench.langgraph_round
"""

import operator
import os
import statistics
import time
import uuid
from collections.abc import Iterable
from typing import Annotated, TypedDict

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

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

SCHEMA = "bench_langgraph"
INSTALL_HINT = "pip install -e '.[bench]'"
# What the scripted guardian answers when its script says nothing (adapters/scripted.py).
CALM = {
    "integrity": 0.01,
    "infeasible": 0.02,
    "goal_reached": 0.05,
    "drift": {"0": 0.0, "1": 0.0, "2": 0.05, "3": 0.25, "4": 0.7},
    "stagnation": 0.05,
}


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


def build_graph(checkpointer, *, turns: int):
    from langgraph.graph import END, START, StateGraph

    from runs.demo_tools import read_order

    policy = default_policy(budgets=Budgets(max_turns=turns + 5))
    # The rounds decide reads: the hysteresis and exact-repeat windows, this round excluded.
    window = history_needed(policy)

    def actor(state: RoundState) -> dict:
        turn = state["turn"]
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
        return {"outcome": decision.outcome.value, "history": [item]}

    graph = StateGraph(RoundState)
    graph.add_node("actor", actor)
    graph.add_node("tool", tool)
    graph.add_node("guardian", guardian)
    graph.add_node("decide", decide_node)
    graph.add_edge(START, "actor")
    graph.add_edge("actor", "tool")
    graph.add_edge("tool", "guardian")
    graph.add_edge("guardian", "decide")
    graph.add_edge("decide", END)
    return graph.compile(checkpointer=checkpointer)


def _conninfo() -> str:
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    db = settings.DATABASES["default"]
    return make_conninfo(
        dbname=db["NAME"],
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=str(db["PORT"]) if db.get("PORT") else None,
    )


class LangGraphLoop:
    """One LangGraph thread on PostgresSaver, advanced one round per `invoke`.

    Use as a context manager: it opens its own connection to the configured database, creates
    the checkpointer's tables in a schema of its own and drops that schema on the way out."""

    def __init__(self, *, turns: int) -> None:
        self.turns = turns
        self.times: dict[int, float] = {}
        self.done = 0

    def __enter__(self) -> "LangGraphLoop":
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        # The settings PostgresSaver documents for a connection of one's own.
        self.connection = Connection.connect(
            _conninfo(), autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        self.connection.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        self.connection.execute(f"CREATE SCHEMA {SCHEMA}")
        self.connection.execute(f"SET search_path TO {SCHEMA}")
        saver = PostgresSaver(self.connection)
        saver.setup()
        self.graph = build_graph(saver, turns=self.turns)
        self.config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex}"}}
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.connection.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        finally:
            self.connection.close()

    def advance_to(self, rounds: int) -> None:
        """Run rounds until `rounds` are done, timing each `invoke`."""
        while self.done < min(rounds, self.turns):
            index = self.done
            start = time.perf_counter()
            out = self.graph.invoke({"turn": index}, self.config, durability="sync")
            self.times[index] = (time.perf_counter() - start) * 1000
            if out["outcome"] != "continue":
                raise RuntimeError(f"LangGraph round {index} decided {out['outcome']!r}")
            if len(out["history"]) != index + 1:
                raise RuntimeError(f"LangGraph round {index} lost its history")
            self.done += 1

    def median(self, window: Iterable[int]) -> float:
        return statistics.median(self.times[i] for i in window)


def report_rounds(
    report: Report,
    loop: LangGraphLoop,
    windows: dict[str, range],
    guardian: dict[str, float] | None,
) -> None:
    """The LangGraph medians per window and, with Guardian's medians, Guardian / LangGraph."""
    medians = {label: loop.median(window) for label, window in windows.items()}
    for label, value in medians.items():
        report.add(f"LangGraph round, {label}", value, "ms", extra="one invoke, durability=sync")
    first, last = medians.values()
    labels = list(medians)
    report.ratio(f"LangGraph {labels[1]} / {labels[0]}", last / first)
    for label, value in medians.items():
        if guardian and label in guardian:
            report.ratio(f"Guardian / LangGraph, {label}", guardian[label] / value)
        if guardian and f"{label}, publishing" in guardian:
            ratio = guardian[f"{label}, publishing"] / value
            report.ratio("  the same, Guardian publishing / LangGraph", ratio)


def measure_alone(report: Report, why_not: str | None) -> None:
    """LangGraph without Guardian alongside (its section was skipped): medians, no ratio."""
    from bench.durable_turn import TURNS, WINDOWS

    if why_not:
        report.skip(why_not)
        return
    with LangGraphLoop(turns=TURNS) as loop:
        loop.advance_to(TURNS)
        report_rounds(report, loop, WINDOWS, None)


def main() -> None:
    report = Report("langgraph")
    measure_alone(report, unavailable())
    report.finish()


if __name__ == "__main__":
    main()
