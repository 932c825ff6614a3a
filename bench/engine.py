"""`make bench`: how long the engine's per-turn work takes, in microseconds (median of runs).

The guardian check runs on every turn, so the code around it must cost next to nothing next to
a model call (tens to hundreds of milliseconds). Each case runs BENCH_ENGINE_NUMBER times
(default 200) per timing, 15 timings; the median and the 90th percentile of the timings are
reported. Pure functions: no database. Run alone: .venv/bin/python -m bench.engine
"""

import os
import statistics
import timeit

from bench.report import Report
from guardian_core.engine.loop import run_turn
from guardian_core.engine.policy import PastTurn, Usage, decide
from guardian_core.engine.state import HistoryItem, LoopState, project, state_hash
from guardian_core.engine.thresholds import default_policy
from guardian_core.engine.tools import validate_call
from tests.engine.fakes import (
    CALM,
    FakeClock,
    Ledger,
    ScriptedActor,
    ScriptedGuardian,
    call,
    desk,
    step,
)

POLICY = default_policy()
STATE = LoopState(
    goal="Refund order ord_4472: the parcel arrived broken.",
    acceptance_criteria=("The refund is issued", "The customer is told"),
    history=tuple(HistoryItem(i, f"turn {i}: read_order done " + "x" * 120) for i in range(30)),
    last_results=('{"order_id": "ord_4472", "total": 49.9, "items": 3}',) * 3,
)
HISTORY = [PastTurn("continue", frozenset(), ('read_order:{"order_id":"ord_1"}',))] * 5
TOOLS = desk(Ledger())


def one_turn() -> None:
    actor = ScriptedActor([step(call("read_order", order_id="ord_4472"))])
    run_turn(
        STATE,
        run_id="bench",
        index=30,
        actor=actor,
        guardian=ScriptedGuardian([CALM]),
        tools=TOOLS,
        clock=FakeClock(),
        policy=POLICY,
        history=HISTORY,
        usage=Usage(turns=30),
    )


CASES = {
    "decide (5 conditions, 5 past turns)": lambda: decide(CALM, POLICY, HISTORY, Usage(turns=6)),
    "validate_call (valid refund)": lambda: validate_call(
        TOOLS, "issue_refund", '{"order_id": "ord_4472", "amount": 49.9}'
    ),
    "validate_call (3 problems)": lambda: validate_call(
        TOOLS, "issue_refund", '{"order": "ord_4472", "amount": "49.9", "why": 1}'
    ),
    "state_hash (30 history items)": lambda: state_hash(STATE),
    "project (30 items, 8 kept, 8000 chars)": lambda: project(STATE),
    "run_turn (scripted ports, one read)": one_turn,
}


NUMBER = int(os.environ.get("BENCH_ENGINE_NUMBER", "200"))
REPEAT = 15


def measure(report: Report) -> dict[str, float]:
    """Report and return the median µs of each case."""
    medians = {}
    for name, case in CASES.items():
        runs = [t / NUMBER * 1e6 for t in timeit.repeat(case, number=NUMBER, repeat=REPEAT)]
        p90 = statistics.quantiles(runs, n=10)[-1]
        medians[name] = statistics.median(runs)
        report.add(name, medians[name], "µs", extra=f"p90 {p90:.1f} µs")
    return medians


def main() -> None:
    report = Report("engine")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
