"""`manage.py probe RUN_ID TURN_INDEX [--drop-result N] [--goal TEXT] [--arguments JSON]`:
re-ask the run's guardian with the turn's logged projection, edited, and show how each
probability and the outcome would move. Nothing is written."""

import json

from django.core.management.base import BaseCommand, CommandError

from runs.models import Run
from runs.replay import ProbeEdits, ProbeInputError, guardian_replay, turn_probe


class Command(BaseCommand):
    help = (
        "Counterfactual probe of one turn: edit its logged projection, ask the guardian again "
        "and decide with the run's policy. Without edits: a guardian replay."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("run_id", type=int)
        parser.add_argument("turn_index", type=int)
        parser.add_argument(
            "--drop-result",
            type=int,
            action="append",
            default=[],
            metavar="N",
            help="Drop tool result N (from 0) from last_results; may be repeated.",
        )
        parser.add_argument("--goal", help="The goal in place of the logged one.")
        parser.add_argument(
            "--arguments", help="The pending call's arguments in place of the logged ones (JSON)."
        )

    def handle(self, *args, run_id, turn_index, drop_result, goal, arguments, **options) -> None:
        run = Run.objects.select_related("policy_version").filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run {run_id}")
        if not run.turns.filter(index=turn_index).exists():
            raise CommandError(f"run {run_id} has no turn {turn_index}")
        has_arguments = arguments is not None
        parsed = None
        if has_arguments:
            try:
                parsed = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise CommandError(f"arguments: not JSON ({exc})") from exc
        edits = ProbeEdits(
            drop_results=tuple(drop_result),
            goal=goal,
            arguments=parsed,
            has_arguments=has_arguments,
        )
        try:
            if edits.any:
                result = turn_probe(run=run, index=turn_index, edits=edits)
            else:
                result = guardian_replay(run=run, index=turn_index)
        except ProbeInputError as exc:
            raise CommandError(str(exc)) from exc
        if not result.available:
            raise CommandError(f"run {run_id} turn {turn_index}: {result.why_not}")
        what = "probe" if edits.any else "guardian replay"
        self.stdout.write(
            f"run {run_id} turn {turn_index}, {what} with {result.model_version} "
            f"(logged: {result.logged_model_version})"
        )
        self.stdout.write(f"{'condition':<14} {'logged':>10} {'new':>10} {'moved':>10}")
        for probe in result.conditions:
            self.stdout.write(
                f"{probe.condition:<14} {_p(probe.old, probe.old_malformed):>10} "
                f"{_p(probe.new, probe.new_malformed):>10} "
                f"{'' if probe.moved is None else f'{probe.moved:+.6f}':>10}"
            )
        stop = f" ({result.new_stop_reason})" if result.new_stop_reason else ""
        self.stdout.write(f"outcome: {result.old_outcome} → {result.new_outcome}{stop}")


def _p(value: float | None, malformed: str) -> str:
    return "malformed" if malformed else f"{value:.6f}"
