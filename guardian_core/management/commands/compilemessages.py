"""Django's compilemessages, which also works where GNU gettext is not installed.

`make demo` compiles the catalogues on a newcomer's laptop, where msgfmt is often missing
(macOS): there polib writes the same .mo files. CI, the Dockerfile and any machine with
gettext use msgfmt, which also checks the catalogues' format strings.
"""

from pathlib import Path

import polib
from django.conf import settings
from django.core.management.commands import compilemessages
from django.core.management.utils import find_command


class Command(compilemessages.Command):
    def handle(self, **options) -> None:
        if find_command(self.program):
            super().handle(**options)
            return
        for root in settings.LOCALE_PATHS:
            for po_path in sorted(Path(root).glob("*/LC_MESSAGES/*.po")):
                polib.pofile(str(po_path)).save_as_mofile(str(po_path.with_suffix(".mo")))
                if options["verbosity"] > 0:
                    self.stdout.write(f"processing file {po_path.name} in {po_path.parent}")
