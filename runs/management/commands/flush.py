"""Django's `flush`, run inside a purge of the decision log (runs/log_triggers.py).

The log's triggers refuse deleting decisions, verdicts and labelled examples outside
`log_purge()`, and on SQLite flush deletes row by row: without the purge, a database holding
any of them could not be flushed (`manage.py flush`, or the teardown of every transactional
test, which then leaves its rows to the next test). Emptying the whole database is a purge of
the whole log, so it goes through the same one door as any other purge, whatever the purge
mechanism is on either database. This app comes before any other app that could define
`flush` in INSTALLED_APPS, so Django's own `call_command("flush")` finds this one.
"""

from django.core.management.commands import flush
from django.db import connections

from runs.log_triggers import log_purge


class Command(flush.Command):
    help = flush.Command.help + " The decision log is emptied as a purge."

    def handle(self, **options) -> None:
        # The question is asked before the purge opens its transaction: on SQLite that
        # transaction holds the one write lock, which a person reading must not hold.
        if options["interactive"] and not self._confirmed(options["database"]):
            self.stdout.write("Flush cancelled.")
            return
        with log_purge(reason="flush: every table emptied"):
            super().handle(**{**options, "interactive": False})

    def _confirmed(self, database: str) -> bool:
        name = connections[database].settings_dict["NAME"]
        answer = input(
            "You have requested a flush of the database.\n"
            f'This will IRREVERSIBLY DESTROY all data currently in the "{name}" database,\n'
            "the decision log included, and return each table to an empty state.\n"
            "Are you sure you want to do this?\n\n"
            "    Type 'yes' to continue, or 'no' to cancel: "
        )
        return answer == "yes"
