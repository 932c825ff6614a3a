"""`manage.py verify_log RUN_ID|--all`: check the decision log's hash chain."""

from django.core.management.base import BaseCommand, CommandError

from runs.audit import run_chain_verify
from runs.models import Run


class Command(BaseCommand):
    help = (
        "Recompute each decision's hash in turn order and check every link of the chain; "
        "names the first broken link (run and turn) and exits non-zero."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id", nargs="?", type=int)
        parser.add_argument("--all", action="store_true", help="Every run.")

    def handle(self, *args, run_id=None, all=False, **options):
        if (run_id is None) == (not all):
            raise CommandError("give a RUN_ID or --all (not both)")
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
                self.stdout.write(report.describe())
            else:
                broken += 1
                self.stderr.write(f"BROKEN {report.describe()}")
        if broken:
            raise CommandError(f"{broken} of {checked} runs have a broken chain", returncode=2)
        self.stdout.write(self.style.SUCCESS(f"{checked} runs checked, every chain intact"))
