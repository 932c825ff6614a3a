"""`manage.py run_scenario NAME`: start one demo scenario (a scripted actor, judged by the local
guardian unless --guardian says) and print its turns as they land."""

import time

from django.core.management.base import BaseCommand, CommandError

from demo.setup import demo_policy_version
from runs.models import Run, RunStatus
from runs.reporting import expectation_problems, run_line, turn_line
from runs.scenarios import scenario_load, scenario_names, scenario_run_start
from runs.selectors import run_turns_decided
from runs.services import run_advance


class Command(BaseCommand):
    help = "Run one demo scenario through the worker (or --inline in this process)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help=f"one of: {', '.join(scenario_names())}")
        # The scenarios carry no guardian script: the real guardian judges them.
        parser.add_argument(
            "--guardian",
            default="local",
            choices=["local", "http", "openai"],
            help="the guardian that judges the run: local (default, in process), or http or "
            "openai when configured",
        )
        parser.add_argument("--inline", action="store_true", help="advance here, no worker")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")

    def handle(self, *args, **options) -> None:
        demo_policy_version()  # the demo's policy, when no version was made active yet
        try:
            expect = scenario_load(options["name"]).get("expect", {})
            run = scenario_run_start(options["name"], guardian=options["guardian"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"run {run.pk}: {run.goal}")
        run = self._follow(run, inline=options["inline"], timeout=options["timeout"])
        self.stdout.write(run_line(run))
        problems = expectation_problems(run, expect)
        if problems:
            raise CommandError("not as expected: " + "; ".join(problems))
        self.stdout.write("as expected")

    def _follow(self, run: Run, *, inline: bool, timeout: float) -> Run:
        deadline = time.monotonic() + timeout
        seen = -1
        while True:
            if inline:
                run_advance(run_id=run.pk)
            for turn in run_turns_decided(run_id=run.pk, after_index=seen):
                self.stdout.write(turn_line(turn))
                seen = turn.index
            run.refresh_from_db()
            if run.status != RunStatus.RUNNING:
                return run
            if time.monotonic() > deadline:
                raise CommandError(
                    f"run {run.pk} still running after {timeout:.0f} s: is a worker running?"
                )
            if not inline:
                time.sleep(0.2)
