"""`manage.py demo`: start every demo scenario, let the worker run them, print how each ended."""

import time

from django.core.management.base import BaseCommand, CommandError

from demo.setup import demo_policy_version
from runs.models import Run, RunStatus
from runs.reporting import expectation_problems, run_line
from runs.scenarios import scenario_load, scenario_names, scenario_run_start


class Command(BaseCommand):
    help = "Run every demo scenario through the real worker and check each ends as it should."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait")
        parser.add_argument(
            "--existing",
            action="store_true",
            help="check the scenario runs make demo already started instead of starting more",
        )

    def handle(self, *args, **options) -> None:
        demo_policy_version()
        if options["existing"]:
            runs = {}
            for run in Run.objects.exclude(config__name=None).order_by("pk"):
                runs.setdefault(run.config["name"], run)
            missing = sorted(set(scenario_names()) - set(runs))
            if missing:
                raise CommandError(f"no run yet for: {', '.join(missing)} (run demo_setup)")
        else:
            runs = {name: scenario_run_start(name) for name in scenario_names()}
        self.stdout.write(f"{len(runs)} scenario runs; waiting for the worker…")
        deadline = time.monotonic() + options["timeout"]
        while True:
            for run in runs.values():
                run.refresh_from_db()
            if all(run.status != RunStatus.RUNNING for run in runs.values()):
                break
            if time.monotonic() > deadline:
                raise CommandError(
                    "runs still running: is a worker running? (make demo starts one)"
                )
            time.sleep(0.5)
        failed = 0
        for name, run in runs.items():
            problems = expectation_problems(run, scenario_load(name).get("expect", {}))
            mark = "ok  " if not problems else "FAIL"
            failed += bool(problems)
            self.stdout.write(f"{mark} {name:<26} {run_line(run)}")
            for problem in problems:
                self.stdout.write(f"       {problem}")
        if failed:
            raise CommandError(f"{failed} scenarios did not end as expected")
