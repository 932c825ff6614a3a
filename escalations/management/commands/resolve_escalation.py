"""`manage.py resolve_escalation ID --approve|--reject --reason ...|--answer condition=label`."""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from escalations.errors import EscalationError
from escalations.verdicts import escalation_resolve


def _label(text: str) -> object:
    lowered = text.strip().lower()
    if lowered in ("yes", "true"):
        return True
    if lowered in ("no", "false"):
        return False
    if lowered.isdigit():
        return int(lowered)
    return text.strip()


class Command(BaseCommand):
    help = "Resolve an open escalation as a reviewer; the run moves on."

    def add_arguments(self, parser) -> None:
        parser.add_argument("escalation_id", type=int)
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--approve", action="store_true", help="run the held step")
        action.add_argument("--reject", action="store_true", help="refuse it (needs --reason)")
        action.add_argument(
            "--answer",
            action="append",
            metavar="CONDITION=LABEL",
            help="answer an uncertain condition, e.g. integrity=no, risk=irreversible, drift=3",
        )
        parser.add_argument("--reason", default="", help="why; the actor is told on a reject")
        parser.add_argument(
            "--calls", help="comma-separated positions of the held calls to approve (default all)"
        )
        parser.add_argument(
            "--rerun",
            action="store_true",
            help="with --reject on an ambiguous call: it did not go through, run it again "
            "under its own idempotency key",
        )
        parser.add_argument("--reviewer", required=True, help="username of the reviewer")

    def handle(self, *args, **options) -> None:
        try:
            reviewer = get_user_model().objects.get(username=options["reviewer"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {options['reviewer']!r}") from None
        answer = None
        if options["answer"]:
            try:
                answer = {
                    key.strip(): _label(value)
                    for key, value in (item.split("=", 1) for item in options["answer"])
                }
            except ValueError:
                raise CommandError("--answer takes CONDITION=LABEL, e.g. integrity=no") from None
        calls = None
        if options["calls"]:
            try:
                calls = [int(part) for part in options["calls"].split(",")]
            except ValueError:
                raise CommandError("--calls takes positions like 0,2") from None
        decision = "approve" if options["approve"] else "reject" if options["reject"] else "answer"
        try:
            verdict = escalation_resolve(
                escalation_id=options["escalation_id"],
                reviewer=reviewer,
                decision=decision,
                reason=options["reason"],
                answer=answer,
                approved_calls=calls,
                rerun=options["rerun"],
            )
        except EscalationError as exc:
            raise CommandError(str(exc)) from None
        if verdict is None:
            self.stdout.write(
                f"escalation {options['escalation_id']}: approval recorded; under the policy's "
                "quorum it needs a second, different approver before anything runs"
            )
            return
        self.stdout.write(
            f"escalation {options['escalation_id']}: {verdict.decision} recorded; "
            f"the run goes on: {verdict.resulting_outcome}; "
            f"labelled examples: {json.dumps(verdict.examples.count())}"
        )
