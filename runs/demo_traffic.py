"""Demo traffic for `make demo`: now and then one more demo scenario run, its scripted
guardian's probabilities jittered, so that on a laptop the monitoring page has days of
probabilities to chart and a shadow trial has live turns to decide.

Each run plays a demo scenario (runs/scenarios/) with every probability the guardian answers
moved in logit space by a seeded random amount: most runs end as their scenario does, some
cross a threshold (an uncertain band, a goal reached a turn late). They are marked
`demo_traffic` in their config; `manage.py demo --existing` checks only the first run of each
scenario, never these.
"""

import copy
import math
import random

from django.conf import settings

from guardian_core.adapters.scripted import CALM_ANSWERS
from runs.models import Run
from runs.scenarios import scenario_load, scenario_names, scenario_run_start

# How far a probability moves: its logit plus a normal draw of this spread.
LOGIT_SPREAD = 0.8


def _jittered(value: object, rng: random.Random) -> object:
    # Only plain probabilities move: a distribution, "timeout" or a deliberately broken answer
    # stays what the scenario says, so it still shows what it was written to show.
    if isinstance(value, bool) or not isinstance(value, float | int) or not 0 < value < 1:
        return value
    logit = math.log(value / (1 - value)) + rng.gauss(0.0, LOGIT_SPREAD)
    return round(min(0.999, max(0.001, 1 / (1 + math.exp(-logit)))), 4)


def _answers(entry: dict, default: dict, rng: random.Random) -> dict:
    full = {**CALM_ANSWERS, **default, **entry}
    return {condition: _jittered(value, rng) for condition, value in full.items()}


def jittered_scenario(scripted: dict, seed: int) -> dict:
    """`scripted` (a scenario's scripted part) with every post-execution probability its
    guardian answers, unnamed ones included (they are CALM_ANSWERS), jittered with `seed`."""
    rng = random.Random(seed)
    out = copy.deepcopy(scripted)
    guardian = out.get("guardian", {})
    default = guardian.get("default", {})
    guardian["turns"] = [_answers(entry, default, rng) for entry in guardian.get("turns", [])]
    if "after_rejection" in guardian:
        guardian["after_rejection"] = _answers(guardian["after_rejection"], default, rng)
    return out


def demo_traffic_start() -> Run | None:
    """Start the next demo traffic run (the scenarios in turn), or None once
    GUARDIAN_DEMO_TRAFFIC_MAX_RUNS of them exist."""
    started = Run.objects.filter(config__demo_traffic=True).count()
    if started >= settings.GUARDIAN_DEMO_TRAFFIC_MAX_RUNS:
        return None
    names = scenario_names()
    name = names[started % len(names)]
    data = scenario_load(name)
    scripted = {k: v for k, v in data.items() if k not in ("expect", "review_loop")}
    return scenario_run_start(
        name,
        scripted=jittered_scenario(scripted, seed=started),
        config={"demo_traffic": True},
    )
