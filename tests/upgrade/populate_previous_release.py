"""Run by the previous release's `manage.py shell` (tests/test_upgrade.py): fill its database
with what a deployment of it holds, through its own services. Prints one JSON line of counts.

Only names both releases share may appear here: the previous release's code runs it."""

import json

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from demo.setup import demo_policy_version
from escalations.models import Escalation, LabelledExample, Verdict
from escalations.verdicts import escalation_resolve
from runs.models import Decision, Run
from runs.services import run_advance, run_start

IRREVERSIBLE = {"read_only": 0, "reversible_write": 0, "irreversible": 1.0, "regulated": 0}
REFUND = {"order_id": "ord_4472", "amount": 49.9}
HELD = {
    "name": "held_refund",
    "goal": "Refund order ord_4472.",
    "acceptance_criteria": ["Refund issued"],
    "tools": ["read_order", "issue_refund"],
    "actor": {
        "turns": [
            {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
            {"calls": [{"tool": "issue_refund", "arguments": REFUND}]},
            {"calls": [], "message": "Refunded ord_4472."},
        ]
    },
    "guardian": {"risk": {"issue_refund": IRREVERSIBLE}, "turns": [{}, {}, {"goal_reached": 0.97}]},
}  # fmt: skip
PLAIN = {
    "name": "plain",
    "goal": "Read order ord_4472.",
    "acceptance_criteria": ["Order read"],
    "tools": ["read_order"],
    "actor": {
        "turns": [
            {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
            {"calls": [], "message": "Order ord_4472 read."},
        ]
    },
    "guardian": {"turns": [{}, {"goal_reached": 0.97}]},
}  # fmt: skip


def advance(run) -> None:
    while run_advance(run_id=run.pk, enqueue_next=False) == "continued":
        pass


def start(scenario):
    run = run_start(
        goal=scenario["goal"],
        acceptance_criteria=scenario["acceptance_criteria"],
        tools=scenario["tools"],
        actor="scripted",
        guardian="scripted",
        config={"scenario": scenario},
    )
    advance(run)
    return run


reviewer = get_user_model().objects.create_user(username="upgrade_reviewer", password="x" * 20)
reviewer.groups.set(Group.objects.filter(name="reviewer"))
demo_policy_version()
for _ in range(2):
    start(PLAIN)
held = [start(HELD) for _ in range(4)]
escalations = [Escalation.objects.get(run=run, status="open") for run in held]
escalation_resolve(escalation_id=escalations[0].pk, reviewer=reviewer, decision="approve")
escalation_resolve(
    escalation_id=escalations[1].pk,
    reviewer=reviewer,
    decision="reject",
    reason="The refund is for another order.",
)
advance(held[0])
advance(held[1])
print(
    json.dumps(
        {
            "runs": Run.objects.count(),
            "decisions": Decision.objects.count(),
            "escalations": Escalation.objects.count(),
            "verdicts": Verdict.objects.count(),
            "examples": LabelledExample.objects.count(),
            "open": sorted(Escalation.objects.filter(status="open").values_list("pk", flat=True)),
            "statuses": dict(Run.objects.values_list("pk", "status")),
            "reviewer": reviewer.username,
        }
    )
)
