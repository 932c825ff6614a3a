"""Django's makemessages with the project's sources only: `manage.py makemessages -l fr`.

What people never read is left out (the virtualenv, tests, the bench and soak drivers, the
training corpus, the Python client), so the catalogue holds the app's words and nothing else.
"""

from django.core.management.commands import makemessages

IGNORED = (
    ".venv/*",
    "var/*",
    "tests/*",
    "bench/*",
    "soak/*",
    "clients/*",
    "training/*",
    "docs/*",
    "deploy/*",
    "scripts/*",
    "node_modules/*",
    "guardian_core/engine/*",
    "guardian_core/adapters/*",
)


class Command(makemessages.Command):
    # Sentences kept as data (guardian_core/said.py) are templates to translate too.
    xgettext_options = [
        *makemessages.Command.xgettext_options,
        "--keyword=said",
        "--keyword=said_count:1,2",
    ]

    def handle(self, *args, **options) -> None:
        options["ignore_patterns"] = [*options.get("ignore_patterns", []), *IGNORED]
        # Source lines move with every edit; the file names stay, which is enough to find a string.
        options["add_location"] = options.get("add_location") or "file"
        options["no_obsolete"] = True
        super().handle(*args, **options)
