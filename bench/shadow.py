"""`make bench`: a shadow trial's pass (policies/shadow.py) over a long run, BENCH_SHADOW_TURNS
turns (default 20 000) logged as a worker logs them, with a candidate that copies the pinned
version: the time per decision of the first and the last batches, and their ratio. Each
decision reads a bounded window of earlier turns, so the last batch should cost what the first
does. Every decision must come out identical to the real one (the candidate is a copy).
Run alone: .venv/bin/python -m bench.shadow
"""

import os
import statistics
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import override_settings  # noqa: E402

from bench.replay import delete_runs, fill  # noqa: E402
from bench.report import Report  # noqa: E402

TURNS = int(os.environ.get("BENCH_SHADOW_TURNS", "20000"))
EDGE_BATCHES = 10  # batches compared at each end of the run


def measure(report: Report) -> float:
    """Report ms per decision at the run's start and end; return the end/start ratio."""
    from demo.setup import demo_policy_version
    from policies.models import ShadowDecision, ShadowTrial
    from policies.services import policy_version_create
    from policies.shadow import BATCH, shadow_trial_catch_up, shadow_trial_start

    call_command("migrate", verbosity=0)
    delete_runs()
    pinned = demo_policy_version()
    candidate = policy_version_create(
        thresholds=pinned.thresholds,
        question_set=pinned.question_set,
        question_set_version=pinned.question_set_version,
        limits=pinned.limits,
        label="bench: shadow copy",
    )
    trial = shadow_trial_start(policy_version_id=candidate.pk, comment="bench")
    try:
        fill(TURNS, projections=True)
        per_batch = []
        with override_settings(GUARDIAN_SHADOW_SETTLE_SECONDS=0):
            while True:
                started = time.perf_counter()
                done = shadow_trial_catch_up(trial_id=trial.pk)
                if not done:
                    break
                per_batch.append((time.perf_counter() - started) * 1000 / done)
        decided = ShadowDecision.objects.filter(trial=trial).count()
        differs = ShadowDecision.objects.filter(trial=trial, differs=True).count()
        if decided != TURNS or differs:
            raise AssertionError(f"{decided} of {TURNS} decided in shadow, {differs} differ")
        if len(per_batch) < 2 * EDGE_BATCHES:
            raise AssertionError(f"BENCH_SHADOW_TURNS={TURNS}: too few batches to compare ends")
        first = statistics.median(per_batch[:EDGE_BATCHES])
        last = statistics.median(per_batch[-EDGE_BATCHES:])
        where = f"batches of {BATCH}, median of {EDGE_BATCHES}"
        report.add("shadow: ms per decision, turns 0–2 500", first, "ms", extra=where)
        report.add(f"shadow: ms per decision, the last 2 500 of {TURNS}", last, "ms", extra=where)
        ratio = last / first
        report.ratio("shadow: last / first batch (1.0 = flat in run length)", ratio)
        return ratio
    finally:
        ShadowTrial.objects.filter(pk=trial.pk).delete()
        delete_runs()
        candidate.delete()


if __name__ == "__main__":
    measure(Report("shadow"))
