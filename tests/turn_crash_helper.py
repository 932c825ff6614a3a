"""A worker's part in tests/test_turn_commit_crash.py, run as a process of its own against
the test's private PostgreSQL: `start` (prints the run's id) or `advance RUN_ID` (one turn,
prints what happened). Its write tool tags the order, then takes its time, so that the test
can kill PostgreSQL after the tag is made and before the turn's second commit."""

import os
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.conf import settings  # noqa: E402

from guardian_core.engine.conditions import RiskClass  # noqa: E402
from guardian_core.engine.tools import Tool  # noqa: E402
from runs.models import DemoSideEffect  # noqa: E402


def _slow_tag(arguments: dict, *, idempotency_key: str) -> str:
    # Made once under its key, as runs.demo_tools.tag_order; then the test's window.
    DemoSideEffect.objects.get_or_create(
        tool="slow_tag", idempotency_key=idempotency_key, defaults={"payload": arguments}
    )
    time.sleep(arguments["seconds"])
    return f"Order {arguments['order_id']} tagged."


SLOW_TAG = Tool(
    name="slow_tag",
    description="Tag an order, slowly (crash test).",
    schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "seconds": {"type": "number"}},
        "required": ["order_id", "seconds"],
    },
    risk_class=RiskClass.REVERSIBLE_WRITE,
    func=_slow_tag,
)
SCENARIO = {
    "name": "tag-through-a-crash",
    "goal": "Tag the damaged order.",
    "tools": ["read_order", "slow_tag"],
    "actor": {
        "turns": [
            {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
            {"calls": [{"tool": "slow_tag", "arguments": {"order_id": "ord_4472", "seconds": 4}}]},
            {"calls": [], "message": "Tagged."},
        ]
    },
    "guardian": {"model_version": "scripted-crash"},
}


def main(argv: list[str]) -> None:
    settings.GUARDIAN_TOOLS = [*settings.GUARDIAN_TOOLS, "tests.turn_crash_helper.SLOW_TAG"]
    settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = True
    from demo.setup import demo_policy_version
    from runs.services import run_advance, run_start

    if argv[0] == "start":
        demo_policy_version()
        run = run_start(
            goal=SCENARIO["goal"],
            tools=SCENARIO["tools"],
            actor="scripted",
            guardian="scripted",
            config={"scenario": SCENARIO},
        )
        print(run.pk)
    else:
        print(run_advance(run_id=int(argv[1]), enqueue_next=False))


if __name__ == "__main__":
    main(sys.argv[1:])
