"""`make bench`: the regression gate on a policy version (policies/policy_gate.py) as the
labelled examples grow to BENCH_GATE_ROWS (default 100 000): ms per report at each size and
SQL statements, and the ratio of the largest size to the first that reads the cap. The gate
reads at most GUARDIAN_GATE_MAX_EXAMPLES (5 000) examples, near-misses first, so past that
size a report should cost the same however many examples there are.
Run alone: .venv/bin/python -m bench.gate
"""

import json
import os
import random
import statistics
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench.report import Report  # noqa: E402

ROWS = int(os.environ.get("BENCH_GATE_ROWS", "100000"))
SIZES = sorted({min(ROWS, n) for n in (1_000, 10_000, ROWS)})
PASSES = 3
MODEL = "bench-gate-1"
CONDITIONS = ("integrity", "risk", "infeasible", "goal_reached", "drift", "stagnation")


def _add_examples(count: int, rng: random.Random) -> None:
    from escalations.models import ExampleSelection, ExampleSource, LabelledExample

    batch = []
    for _ in range(count):
        condition = rng.choice(CONDITIONS)
        positive = rng.random() < 0.4
        label = (
            ("irreversible" if positive else "read_only")
            if condition == "risk"
            else (1 if positive else 3)
            if condition == "drift"
            else positive
        )
        batch.append(
            LabelledExample(
                condition=condition,
                projection={"goal": "bench", "last_results": ["an output of the bench"]},
                probability=round(rng.betavariate(0.6 if positive else 0.3, 0.6), 4),
                label=label,
                source=ExampleSource.IMPORT,
                selection=ExampleSelection.IMPORTED,
                question_set_version="bench",
                model_version=MODEL,
            )
        )
    LabelledExample.objects.bulk_create(batch, batch_size=2000)


def _delete_examples() -> None:
    from escalations.models import LabelledExample
    from runs.log_triggers import log_purge

    with (
        log_purge(reason="bench cleanup: the gate section's examples", actor="make bench"),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            f"DELETE FROM {LabelledExample._meta.db_table} WHERE model_version = %s", [MODEL]
        )


def _cap() -> int:
    from django.conf import settings

    return settings.GUARDIAN_GATE_MAX_EXAMPLES


def measure(report: Report) -> float:
    """Report ms and SQL statements per gate report at each size; return largest/smallest."""
    from demo.setup import demo_policy_version
    from policies.policy_gate import gate_report
    from policies.services import policy_version_create

    call_command("migrate", verbosity=0)
    from escalations.models import LabelledExample

    if LabelledExample.objects.exclude(model_version=MODEL).exists():
        report.note("other labelled examples are in this database: they count towards the sizes")
    _delete_examples()
    active = demo_policy_version()
    thresholds = json.loads(json.dumps(active.thresholds))
    thresholds["integrity"] = {"c_stop": 1, "c_cont": 3, "delta": 0.05}
    candidate = policy_version_create(
        thresholds=thresholds,
        question_set=active.question_set,
        question_set_version=active.question_set_version,
        label="bench: gate candidate",
    )
    rng = random.Random(7)
    medians = {}
    try:
        have = 0
        for size in SIZES:
            _add_examples(size - have, rng)
            have = size
            times = []
            for _ in range(PASSES):
                with CaptureQueriesContext(connection) as queries:
                    started = time.perf_counter()
                    result = gate_report(candidate=candidate)
                    times.append((time.perf_counter() - started) * 1000)
            used = result["examples"]["used"]
            medians[size] = statistics.median(times)
            report.add(
                f"gate: one report at {size:,} labelled examples",
                medians[size],
                "ms",
                extra=f"{used:,} read, {len(queries)} SQL statements, median of {PASSES}",
            )
        # Compared from the first size that reads the cap: below it a report reads fewer rows.
        base = next((n for n in SIZES if n >= _cap()), SIZES[0])
        ratio = medians[SIZES[-1]] / medians[base]
        report.ratio(f"gate: {SIZES[-1]:,} / {base:,} examples (1.0 = flat)", ratio)
        return ratio
    finally:
        _delete_examples()
        candidate.delete()


if __name__ == "__main__":
    measure(Report("gate"))
