"""`manage.py purge_run RUN_ID --yes`: delete a run and its whole log (an operator's purge)."""

from django.core.management.base import BaseCommand, CommandError

from runs.audit import run_purge


class Command(BaseCommand):
    help = (
        "Delete a run with its turns, calls, decisions, escalations, verdicts and labelled "
        "examples: the one way around the log's append-only triggers. Export it first."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int)
        parser.add_argument("--yes", action="store_true", help="Confirm: this cannot be undone.")
        parser.add_argument(
            "--reason",
            default="",
            help="Why, for the purge log (default: purge_run of run RUN_ID).",
        )
        parser.add_argument(
            "--actor",
            default="",
            help="Who asks, for the purge log (default: this OS user and process).",
        )

    def handle(self, *args, run_id, yes=False, reason="", actor="", **options):
        if not yes:
            raise CommandError("a purge cannot be undone: add --yes (export_run it first)")
        reason = reason.strip() or f"purge_run of run {run_id}"
        if not run_purge(run_id=run_id, reason=reason, actor=actor.strip()):
            raise CommandError(f"no run {run_id}")
        self.stdout.write(f"run {run_id} purged")
