"""`manage.py replay RUN_ID | --all`: replay every logged decision through the engine's
`decide` and exit 1 on any mismatch."""

import sys
import time

from django.core.management.base import BaseCommand, CommandError

from runs.models import Run
from runs.replay import DIFFERENT, NOT_REPLAYABLE, RunReplaySummary, run_replay


class Command(BaseCommand):
    help = (
        "Recompute each turn's policy outcome from its logged answers, history, usage and "
        "calls with the run's pinned policy version; exit 1 if any differs."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("run_id", nargs="?", type=int, help="The run to replay.")
        parser.add_argument("--all", action="store_true", help="Replay every run.")
        parser.add_argument(
            "--quiet", action="store_true", help="Print only mismatches and the summary."
        )

    def handle(self, *args, run_id: int | None, all: bool, quiet: bool, **options) -> None:
        if (run_id is None) == (not all):
            raise CommandError("give either RUN_ID or --all (not both)")
        summary = RunReplaySummary()
        started = time.perf_counter()
        unreplayable: list[int] = []
        if all:
            unreplayable = self._replay_all(summary)
        else:
            run = Run.objects.select_related("policy_version").filter(pk=run_id).first()
            if run is None:
                raise CommandError(f"no run {run_id}")
            try:
                for result in run_replay(run=run):
                    summary.add(result)
                    if not quiet or result.status == DIFFERENT:
                        self.stdout.write(_line(result))
            except ValueError as exc:  # a policy version stored before versions were checked
                raise CommandError(f"run {run.pk}: cannot be replayed: {exc}") from exc
        seconds = time.perf_counter() - started
        self.stdout.write(
            f"{summary.total} decisions replayed in {seconds:.2f} s: {summary.identical} "
            f"identical, {summary.different} different, {summary.not_replayable} not "
            "replayable by decide (coder ⇄ reviewer rounds)"
        )
        if unreplayable:
            self.stderr.write(f"runs that cannot be replayed: {unreplayable[:50]}")
        if summary.different:
            for result in summary.mismatches[:50]:
                self.stderr.write(f"MISMATCH {_line(result)}")
        if summary.different or unreplayable:
            sys.exit(1)

    def _replay_all(self, summary: RunReplaySummary) -> list[int]:
        """Replay every run into `summary`; returns the runs that could not be replayed."""
        unreplayable: list[int] = []
        ids = list(Run.objects.order_by("pk").values_list("pk", flat=True))
        progress = sys.stderr.isatty()
        for n, run_id in enumerate(ids, start=1):
            run = Run.objects.select_related("policy_version").get(pk=run_id)
            try:
                for result in run_replay(run=run):
                    summary.add(result)
                    if result.status == DIFFERENT:
                        self.stdout.write(_line(result))
            except ValueError as exc:  # one bad run does not hide the others': counted, exit 1
                self.stdout.write(f"run {run.pk}: cannot be replayed: {exc}")
                unreplayable.append(run.pk)
            # A progress line rewritten in place (no dependency): runs done, decisions, mismatches.
            line = f"\rrun {n}/{len(ids)}  {summary.total} decisions  {summary.different} different"
            if progress or n == len(ids):
                sys.stderr.write(line + ("\n" if n == len(ids) else ""))
                sys.stderr.flush()
        return unreplayable


def _line(result) -> str:
    where = f"run {result.run_id} turn {result.turn_index}"
    if result.status == NOT_REPLAYABLE:
        return f"{where}: not replayable by decide ({result.logged_outcome}; {result.note})"
    if result.status == DIFFERENT:
        return f"{where}: DIFFERENT: {'; '.join(result.differences)}"
    stop = f" ({result.logged_stop_reason})" if result.logged_stop_reason else ""
    return f"{where}: identical ({result.logged_outcome}{stop})"
