"""`manage.py replay RUN_ID | --all [--workers N]`: replay every logged decision through the
engine's `decide` and exit 1 on any mismatch (or when a run cannot be replayed, or a replay
failed). The runs, and a long run's segments, are spread over N processes
(runs/replay_parallel.py); what is printed, and in which order, does not depend on N."""

import argparse
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from runs.models import Run
from runs.replay import DIFFERENT, NOT_REPLAYABLE, RunReplaySummary
from runs.replay_parallel import ReplayWorkerError, default_workers, plan_all, replay_segments


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


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
        parser.add_argument(
            "--workers",
            type=_workers,
            default=None,
            metavar="N",
            help="Processes to replay in (default: the number of CPUs; 1: in this process).",
        )

    def handle(
        self,
        *args,
        run_id: int | None,
        all: bool,
        quiet: bool,
        workers: int | None,
        **options,
    ) -> None:
        if (run_id is None) == (not all):
            raise CommandError("give either RUN_ID or --all (not both)")
        workers = default_workers() if workers is None else workers
        summary = RunReplaySummary()
        started = time.perf_counter()
        unreplayable: list[int] = []
        if all:
            ids = list(Run.objects.order_by("pk").values_list("pk", flat=True))
            unreplayable = self._replay(
                summary, ids, workers=workers, every_line=False, progress_lines=True
            )
        else:
            if not Run.objects.filter(pk=run_id).exists():
                raise CommandError(f"no run {run_id}")
            if self._replay(
                summary, [run_id], workers=workers, every_line=not quiet, progress_lines=False
            ):
                # A policy version stored before versions were checked.
                raise CommandError(f"run {run_id}: cannot be replayed: {self._cannot}")
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

    def _replay(
        self,
        summary: RunReplaySummary,
        ids: list[int],
        *,
        workers: int,
        every_line: bool,
        progress_lines: bool,
    ) -> list[int]:
        """Replay the runs `ids` into `summary`, printing each differing turn (each turn with
        `every_line`) in order of run then turn; returns the runs that could not be replayed
        (named on stdout in their place, and the others replayed all the same). A replay that
        raised, here or in a child, ends the command with its run and turns named."""
        unreplayable: list[int] = []
        progress = sys.stderr.isatty()
        position = {run_id: n for n, run_id in enumerate(ids, start=1)}
        tasks = plan_all(run_ids=ids, workers=workers)
        last = {segment.run_id: segment for task in tasks for segment in task}
        self._cannot = ""
        try:
            for result in replay_segments(tasks, workers=workers, keep_all=every_line):
                run_id = result.segment.run_id
                if result.cannot:
                    # One bad run does not hide the others': counted, exit 1. Its segments
                    # all say so; it is named once.
                    if result.segment.start == 0:
                        self.stdout.write(f"run {run_id}: cannot be replayed: {result.cannot}")
                        unreplayable.append(run_id)
                        self._cannot = result.cannot
                else:
                    summary.identical += result.identical
                    summary.different += result.different
                    summary.not_replayable += result.not_replayable
                    for replayed in result.results:
                        if replayed.status == DIFFERENT:
                            summary.mismatches.append(replayed)
                        self.stdout.write(_line(replayed))
                if progress_lines and result.segment == last[run_id]:
                    # A progress line rewritten in place (no dependency): runs done,
                    # decisions, mismatches.
                    n = position[run_id]
                    line = (
                        f"\rrun {n}/{len(ids)}  {summary.total} decisions  "
                        f"{summary.different} different"
                    )
                    if progress or n == len(ids):
                        sys.stderr.write(line + ("\n" if n == len(ids) else ""))
                        sys.stderr.flush()
        except ReplayWorkerError as exc:
            raise CommandError(str(exc)) from exc
        return unreplayable


def _line(result) -> str:
    where = f"run {result.run_id} turn {result.turn_index}"
    if result.status == NOT_REPLAYABLE:
        return f"{where}: not replayable by decide ({result.logged_outcome}; {result.note})"
    if result.status == DIFFERENT:
        return f"{where}: DIFFERENT: {'; '.join(result.differences)}"
    stop = f" ({result.logged_stop_reason})" if result.logged_stop_reason else ""
    return f"{where}: identical ({result.logged_outcome}{stop})"
