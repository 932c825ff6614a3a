"""`manage.py verify_log RUN_ID|--all|--file ARCHIVE`: check the decision log's keyed seals
(runs/chain.py), in the database or in signed archives offline (runs/archives.py)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from guardian_core.metrics import chain_verify_record
from runs.archives import archive_check_file
from runs.audit import run_chain_verify
from runs.chain import ChainReport
from runs.models import Run


def _count(number: int, noun: str, plural: str = "") -> str:
    """'1 decision', '2 decisions', '0 decisions'."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def _line(report: ChainReport) -> str:
    head = report.head or "(none yet)"
    return f"run {report.run_id}: {_count(report.decisions, 'decision')}, chain intact, head {head}"


class Command(BaseCommand):
    help = (
        "Check every decision's keyed seal over the story it rests on, every link of the "
        "chain, each run's seal and its status against its last decision; names every "
        "problem (run and turn), goes on to the next run, and exits non-zero. With --file, "
        "checks a signed run archive offline instead: its signature under the log's key and "
        "the chain inside it, recomputed."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id", nargs="?", type=int)
        parser.add_argument("--all", action="store_true", help="Every run.")
        parser.add_argument(
            "--file",
            action="append",
            default=[],
            metavar="ARCHIVE",
            help="A run archive written by retention (repeat for several); no database read.",
        )

    def handle(self, *args, run_id=None, all=False, file=(), **options):
        if file:
            if run_id is not None or all:
                raise CommandError("give --file alone (not with a RUN_ID or --all)")
            return self._archives(file)
        if (run_id is None) == (not all):
            raise CommandError("give a RUN_ID, --all or --file ARCHIVE")
        if all:
            runs = Run.objects.order_by("id").only("id", "uid").iterator()
        else:
            runs = Run.objects.filter(pk=run_id).only("id", "uid")
            if not runs:
                raise CommandError(f"no run {run_id}")
        broken = checked = 0
        for run in runs:
            report = run_chain_verify(run)
            checked += 1
            if report.ok:
                self.stdout.write(_line(report))
            else:
                broken += 1
                for line in report.lines():
                    self.stderr.write(f"BROKEN {line}")
        if all:
            # The scrape's guardian_chain_broken_runs: the last full check (docs/OPERATIONS.md).
            chain_verify_record(settings.VAR_DIR, checked=checked, broken=broken)
        if broken:
            verb = "has" if broken == 1 else "have"
            raise CommandError(
                f"{broken} of {_count(checked, 'run')} {verb} a broken chain", returncode=2
            )
        every = "the chain intact" if checked == 1 else "every chain intact"
        self.stdout.write(self.style.SUCCESS(f"{_count(checked, 'run')} checked, {every}"))

    def _archives(self, paths) -> None:
        bad = 0
        for path in paths:
            report = archive_check_file(path)
            if report.ok:
                self.stdout.write(report.describe())
            else:
                bad += 1
                for problem in report.problems:
                    self.stderr.write(f"BROKEN archive {path}: {problem}")
        if bad:
            verb = "does" if bad == 1 else "do"
            raise CommandError(
                f"{bad} of {_count(len(paths), 'archive')} {verb} not verify", returncode=2
            )
        every = "it verifies" if len(paths) == 1 else "every one verifies"
        self.stdout.write(self.style.SUCCESS(f"{_count(len(paths), 'archive')} checked, {every}"))
