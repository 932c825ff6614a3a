"""`manage.py activate_guardian_model N`: guardian model version N becomes the one runs on its
adapter use, in one transaction (`--deactivate ADAPTER` goes back to the adapter as it ships)."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from guardian_core.learning import (
    LearningError,
    guardian_model_activate_replacing,
    guardian_model_deactivate,
)
from guardian_core.models import GuardianAdapter


class Command(BaseCommand):
    help = (
        "Activate guardian model version N: runs on its adapter use it from their next turn, "
        "and the version active before is retired in the same transaction."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("number", nargs="?", type=int, metavar="N")
        parser.add_argument(
            "--deactivate",
            choices=GuardianAdapter.values,
            metavar="ADAPTER",
            help="retire the active version of ADAPTER instead (runs use the adapter as it is)",
        )

    def handle(self, *args, **options) -> None:
        if options["deactivate"]:
            if options["number"] is not None:
                raise CommandError("give N or --deactivate ADAPTER, not both")
            adapter = options["deactivate"]
            retired = guardian_model_deactivate(adapter=adapter)
            self.stdout.write(
                f"{adapter}: retired guardian model version {retired.number} "
                f"({retired.model_version}); runs go back to the {adapter} adapter as it ships"
                if retired
                else f"{adapter}: no version was active; runs already use the {adapter} adapter "
                "as it ships"
            )
            return
        if options["number"] is None:
            raise CommandError("N: which guardian model version? (or --deactivate ADAPTER)")
        try:
            version, replaced = guardian_model_activate_replacing(number=options["number"])
        except LearningError as exc:
            raise CommandError(str(exc)) from exc
        before = (
            f"it replaced version {replaced.number} ({replaced.model_version})"
            if replaced
            else "no version was active before"
        )
        self.stdout.write(
            f"Guardian model version {version.number} ({version.model_version}) is active "
            f"for {version.adapter} runs; {before}"
        )
