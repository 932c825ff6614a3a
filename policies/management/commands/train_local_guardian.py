"""`manage.py train_local_guardian [--condition C ...] [--recalibrate] [--activate]`: the local
guardian retrained on its bundled corpus plus the labelled examples, as a new guardian model
version (and, with --recalibrate, a map over it at the live prior as another)."""

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation import gettext as _

from guardian_core.engine.calibration import DEFAULT_SEED
from guardian_core.engine.conditions import Condition
from policies.learning import (
    LearningError,
    guardian_model_activate,
    guardian_model_recalibrate,
    guardian_model_retrain_local,
)
from policies.management.commands.recalibrate import (
    live_priors_option,
    version_summary,
    version_table,
)


class Command(BaseCommand):
    help = (
        "Retrain the local guardian on its bundled corpus plus the labelled examples (minus a "
        "held-out share per condition, on which the bundled and the retrained models are "
        "compared) as a new guardian model version, inactive unless --activate. No model is "
        "stored: the version records its examples and retrains from them at first use."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--condition",
            action="append",
            choices=[c.value for c in Condition],
            help="a condition to teach (repeatable; default: every one with examples)",
        )
        parser.add_argument(
            "--recalibrate",
            action="store_true",
            help="then fit a map per condition over the retrained version's answers, at the "
            "live prior (as `recalibrate --over N` does): the version printed is that one",
        )
        parser.add_argument(
            "--live-prior",
            action="append",
            default=[],
            metavar="CONDITION=SHARE",
            help="with --recalibrate: the traffic's share of positives for a condition, e.g. "
            "integrity=0.05 (repeatable)",
        )
        parser.add_argument(
            "--include-judge",
            action="store_true",
            help="learn from the second-tier judge's labels too (default: people's only)",
        )
        parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the split's seed")
        parser.add_argument(
            "--activate", action="store_true", help="activate it (the last one made) at once"
        )
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args, **options) -> None:
        try:
            version = guardian_model_retrain_local(
                conditions=options["condition"],
                include_judge=options["include_judge"],
                seed=options["seed"],
            )
            if options["recalibrate"]:
                self.stderr.write(
                    _("retrained as version %(number)s; recalibrating it")
                    % {"number": version.number}
                )
                version = guardian_model_recalibrate(
                    adapter=version.adapter,
                    conditions=options["condition"],
                    over=version.number,
                    include_judge=options["include_judge"],
                    live_priors=live_priors_option(options["live_prior"]),
                    seed=options["seed"],
                )
            if options["activate"]:
                version = guardian_model_activate(number=version.number)
        except LearningError as exc:
            raise CommandError(str(exc), returncode=1) from exc
        self.stdout.write(
            json.dumps(version_summary(version), indent=2)
            if options["json"]
            else version_table(version)
        )
