"""CI's reviewer for the client's example on `make demo`: decides each escalation of an external
run as a reviewer would in the queue (approves the held refund, answers that the order note is
an injection) until it has decided EXPECTED (2) of them, or 150 s pass."""

import os
import sys
import time

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402

from escalations.models import Escalation, EscalationKind, EscalationStatus  # noqa: E402
from escalations.verdicts import escalation_resolve  # noqa: E402

expected = int(os.environ.get("EXPECTED", "2"))
reviewer = get_user_model().objects.get(username="reviewer")
decided = 0
deadline = time.monotonic() + 150
while decided < expected and time.monotonic() < deadline:
    open_ones = Escalation.objects.raised().filter(
        status=EscalationStatus.OPEN, run__actor="external"
    )
    for escalation in open_ones:
        if escalation.kind == EscalationKind.GATED_STEP:
            verdict = {"decision": "approve"}
        else:
            verdict = {"decision": "answer", "answer": {"integrity": True}}
        escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, reason="", **verdict)
        decided += 1
        print(f"reviewer: escalation {escalation.pk} ({escalation.kind}): {verdict['decision']}")
    time.sleep(0.5)
print(f"reviewer: {decided} of {expected} escalations decided")
sys.exit(0 if decided == expected else 1)
