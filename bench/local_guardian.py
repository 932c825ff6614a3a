"""`make bench`: the built-in local guardian's `answer()` latency over all six conditions.

The models are read from their artefact at first use, so they are loaded first (that time is
reported apart); then `answer()` is asked BENCH_LOCAL_ANSWERS times (default 100) about a
realistic projection with a pending refund (so risk is classified, not skipped) and the median
is reported. No Django, no
database. Run alone: .venv/bin/python -m bench.local_guardian
"""

import os
import statistics
import time

from bench.report import Report
from guardian_core.adapters.local import LocalGuardian
from guardian_core.engine.conditions import Condition

ANSWERS = int(os.environ.get("BENCH_LOCAL_ANSWERS", "100"))
PROJECTION = {
    "goal": "Refund order ord_4472: the parcel arrived broken.",
    "acceptance_criteria": ["The refund is issued", "The customer is told"],
    "history": [
        {"turn": 1, "summary": "turn 1: read_order done"},
        {"turn": 2, "summary": "turn 2: lookup_policy done"},
        {"turn": 3, "summary": "turn 3: search_docs done"},
    ],
    "last_results": [
        '{"order_id": "ord_4472", "total": 49.9, "status": "delivered", "damaged": true}',
        "Damaged items are refunded in full within 30 days of delivery.",
    ],
    "pending_proposal": {
        "tool": "issue_refund",
        "description": "Issue a refund for an order.",
        "arguments": {"order_id": "ord_4472", "amount": 49.9},
        "intent": "refund the broken parcel in full",
    },
    "replans": 0,
}


# An ordinary long tool output (a help-desk article with a table and code, ~5 000 characters):
# the cost of an answer grows with the text it reads, so the bench reads a long one too.
LONG_OUTPUT = "\n".join(
    [
        "# Returns and refunds: how the desk handles a damaged parcel",
        *(
            f"Step {n}: check the order record, compare the photos with the packing list and "
            f"note the carrier's reference in the ticket before you answer the customer."
            for n in range(1, 21)
        ),
        "| order | total | status | carrier |",
        "|---|---|---|---|",
        *(f"| ord_{4400 + n} | {19.9 + n:.2f} | delivered | DPD |" for n in range(25)),
        "```python",
        "def refund_total(items):",
        "    return round(sum(i.price * i.quantity for i in items), 2)",
        "```",
        "Questions? Reply to this e-mail and the desk will get back to you within a day.",
    ]
)
LONG_PROJECTION = PROJECTION | {"last_results": [LONG_OUTPUT, *PROJECTION["last_results"]]}


def asked(projection: dict, n: int) -> dict:
    """The n-th ask of the bench: the projection with its first tool output and its last summary
    made new (a ticket number, a turn), as every turn of a run brings a new output. Asking the
    same texts over and over would measure the guardian's per-process caches instead."""
    first, *rest = projection["last_results"]
    history = [*projection["history"], {"turn": 4 + n, "summary": f"turn {4 + n}: note_{n} done"}]
    return projection | {"last_results": [f"Ticket T-{n}: {first}", *rest], "history": history}


def measure(report: Report) -> float:
    """Report the model's loading time and the median ms of one answer() on a short and on a long
    tool output; returns the short one's median."""
    guardian = LocalGuardian()
    report.add("loading the model at first use (once per process)", guardian.warm(), "s")
    conditions = list(Condition)
    guardian.answer(PROJECTION, conditions)  # the first answer pays for lazy imports
    medians = {}
    for name, projection in [("short outputs", PROJECTION), ("a 5 kB output", LONG_PROJECTION)]:
        times = []
        for n in range(ANSWERS):
            ask = asked(projection, n)
            start = time.perf_counter()
            guardian.answer(ask, conditions)
            times.append((time.perf_counter() - start) * 1000)
        median = medians[name] = statistics.median(times)
        # The budget: ≤ 5 ms median and ≤ 15 ms p95 on a 5 kB output, one core.
        p95 = statistics.quantiles(times, n=20)[-1] if len(times) > 1 else median
        extra = f"p95 {p95:.2f} ms, {ANSWERS} asks"
        report.add(f"answer(), {len(conditions)} conditions, {name}", median, "ms", extra=extra)
    return medians["short outputs"]


def main() -> None:
    report = Report("local guardian")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
