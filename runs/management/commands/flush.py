"""`manage.py flush`, Django's own, run inside the decision log's purge (runs/log_triggers.py):
emptying every table deletes decisions, verdicts and labelled examples, which the log's
triggers refuse anywhere else. Django's test cases flush the same way between transactional
tests. On PostgreSQL the purge log records each flush."""

from django.core.management.commands.flush import Command as FlushCommand

from runs.log_triggers import log_purge


class Command(FlushCommand):
    def handle(self, **options):
        if options["interactive"]:
            # Asked before the purge opens: no transaction waits on a person.
            answer = input(
                "This deletes every row of every table, the decision log included, and cannot "
                "be undone. Type 'yes' to continue, or 'no' to cancel: "
            )
            if answer != "yes":
                self.stdout.write("Flush cancelled.")
                return
        with log_purge(reason="flush: every table emptied"):
            super().handle(**{**options, "interactive": False})
