"""`manage.py export_run RUN_ID [-o FILE]`: a run as one JSON document."""

import json

from django.core.management.base import BaseCommand, CommandError

from runs.audit import run_export
from runs.models import Run


class Command(BaseCommand):
    help = "Write a run (turns, calls, decisions with their hashes, escalations, verdicts) as JSON."

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int)
        parser.add_argument("-o", "--output", help="File to write (default: standard output).")

    def handle(self, *args, run_id, output=None, **options):
        run = Run.objects.filter(pk=run_id).select_related("policy_version", "created_by").first()
        if run is None:
            raise CommandError(f"no run {run_id}")
        text = json.dumps(run_export(run), ensure_ascii=False, indent=1)
        if output:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        else:
            self.stdout.write(text)
