"""Demo traffic for `make demo`: now and then one more demo scenario run, judged by the local
guardian, so that on a laptop the monitoring page has days of probabilities to chart and a
shadow trial has live turns to decide.

The scenarios (runs/scenarios/) are taken in turn, each played by its scripted actor and judged
by the local guardian like any run, so a traffic run ends as its scenario's story does and
its probabilities are the guardian's own. They are marked `demo_traffic` in their config;
`manage.py demo --existing` checks only the first run of each scenario, never these.
"""

from django.conf import settings

from runs.models import Run
from runs.scenarios import scenario_names, scenario_run_start

# The guardian demo traffic is judged by: the real one, never a script.
DEMO_TRAFFIC_GUARDIAN = "local"


def demo_traffic_start() -> Run | None:
    """Start the next demo traffic run (the scenarios in turn), or None once
    GUARDIAN_DEMO_TRAFFIC_MAX_RUNS of them exist."""
    started = Run.objects.filter(config__demo_traffic=True).count()
    if started >= settings.GUARDIAN_DEMO_TRAFFIC_MAX_RUNS:
        return None
    names = scenario_names()
    return scenario_run_start(
        names[started % len(names)],
        guardian=DEMO_TRAFFIC_GUARDIAN,
        config={"demo_traffic": True},
    )
