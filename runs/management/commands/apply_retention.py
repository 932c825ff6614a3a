"""`manage.py apply_retention`: one retention pass now (beat runs one every hour)."""

from django.conf import settings
from django.core.management.base import BaseCommand

from runs.retention import retention_apply


def _days(days: int) -> str:
    return "kept forever" if days == 0 else f"{days} days"


class Command(BaseCommand):
    help = (
        "Archive (signed, in GUARDIAN_ARCHIVE_DIR) and purge the finished runs past "
        "GUARDIAN_RETAIN_RUNS_DAYS; delete the labelled examples past "
        "GUARDIAN_RETAIN_EXAMPLES_DAYS that no run seals and no guardian model version learnt "
        "from, and the notification deliveries past GUARDIAN_RETAIN_NOTIFICATIONS_DAYS. "
        "0 keeps a kind forever."
    )

    def handle(self, *args, **options):
        self.stdout.write(
            f"runs: {_days(settings.GUARDIAN_RETAIN_RUNS_DAYS)}; labelled examples: "
            f"{_days(settings.GUARDIAN_RETAIN_EXAMPLES_DAYS)}; notification deliveries: "
            f"{_days(settings.GUARDIAN_RETAIN_NOTIFICATIONS_DAYS)}; archives in "
            f"{settings.GUARDIAN_ARCHIVE_DIR}"
        )
        report = retention_apply()
        for run_id, path in report.archived:
            self.stdout.write(f"run {run_id} archived to {path} and purged")
        for run_id in report.held_for_models:
            self.stdout.write(f"run {run_id} kept: a guardian model version learnt from it")
        for run_id in report.held_broken:
            self.stderr.write(f"run {run_id} kept: its chain is broken (verify_log {run_id})")
        runs = len(report.archived)
        self.stdout.write(
            self.style.SUCCESS(
                f"{runs} run{'' if runs == 1 else 's'} archived and purged, "
                f"{report.examples_deleted} labelled examples deleted "
                f"({report.examples_kept_for_models} kept for model versions), "
                f"{report.notifications_deleted} notification deliveries deleted"
            )
        )
