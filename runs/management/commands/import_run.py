"""`manage.py import_run FILE`: create a run from an export_run document."""

import json

from django.core.management.base import BaseCommand, CommandError

from runs.audit import ImportProblem, run_chain_verify, run_import


class Command(BaseCommand):
    help = "Import a run exported by export_run (new ids; the hash chain must verify here)."

    def add_arguments(self, parser):
        parser.add_argument("file")

    def handle(self, *args, file, **options):
        try:
            with open(file, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        try:
            run = run_import(document)
        except ImportProblem as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"imported as run {run.pk}; {run_chain_verify(run).describe()}")
