"""`manage.py activate_guardian_model N`: guardian model version N becomes the one runs on its
adapter use, in one transaction, once the regression gate lets it through (`--deactivate
ADAPTER` goes back to the adapter as it ships)."""

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation import gettext as _

from guardian_core.models import GuardianAdapter
from guardian_core.said import worded
from policies.learning import (
    LearningError,
    guardian_model_activate_replacing,
    guardian_model_deactivate,
)


class Command(BaseCommand):
    help = (
        "Activate guardian model version N: the regression gate first compares it with what "
        "runs on its adapter use now, on the labelled examples neither learnt from, and refuses "
        "(exit 1, every reason listed) when calibration or expected cost gets worse beyond "
        "GUARDIAN_GATE_COST_TOLERANCE beyond the noise, or cannot decide on too few examples "
        "(exit 1 too), unless --override-reason is given. Once active, runs on "
        "its adapter use it from their next turn, and the version active before is retired in "
        "the same transaction."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("number", nargs="?", type=int, metavar="N")
        parser.add_argument(
            "--deactivate",
            choices=GuardianAdapter.values,
            metavar="ADAPTER",
            help="retire the active version of ADAPTER instead (runs use the adapter as it is)",
        )
        parser.add_argument(
            "--comment", default="", metavar="TEXT", help="why, kept with the activation"
        )
        parser.add_argument(
            "--override-reason",
            default="",
            metavar="TEXT",
            help="activate even when the gate refuses, recording this reason",
        )

    def handle(self, *args, **options) -> None:
        if options["deactivate"]:
            if options["number"] is not None:
                raise CommandError(_("give N or --deactivate ADAPTER, not both"))
            adapter = options["deactivate"]
            retired = guardian_model_deactivate(adapter=adapter)
            self.stdout.write(
                _(
                    "%(adapter)s: retired guardian model version %(number)s "
                    "(%(model_version)s); runs go back to the %(adapter)s adapter as it ships"
                )
                % {
                    "adapter": adapter,
                    "number": retired.number,
                    "model_version": retired.model_version,
                }
                if retired
                else _(
                    "%(adapter)s: no version was active; runs already use the %(adapter)s "
                    "adapter as it ships"
                )
                % {"adapter": adapter}
            )
            return
        if options["number"] is None:
            raise CommandError(_("N: which guardian model version? (or --deactivate ADAPTER)"))
        try:
            version, replaced = guardian_model_activate_replacing(
                number=options["number"],
                comment=options["comment"],
                override_reason=options["override_reason"],
            )
        except LearningError as exc:
            raise CommandError(str(exc), returncode=1) from exc
        before = (
            _("it replaced version %(number)s (%(model_version)s)")
            % {"number": replaced.number, "model_version": replaced.model_version}
            if replaced
            else _("no version was active before")
        )
        activation = version.activations.order_by("-pk").first()
        report = activation.gate_report
        if activation.override_reason:
            gate = (
                _("the gate could not decide on so few examples, overridden: %(reason)s")
                if report.get("undecided")
                else _("the gate refused it, overridden: %(reason)s")
            ) % {"reason": activation.override_reason}
        elif report.get("note"):
            gate = _("gate: %(note)s") % {"note": worded(report["note"])}
        else:
            gate = _("the gate passed it on %(count)s examples") % {
                "count": report["examples"]["used"]
            }
        self.stdout.write(
            _(
                "Guardian model version %(number)s (%(model_version)s) is active for "
                "%(adapter)s runs; %(before)s; %(gate)s"
            )
            % {
                "number": version.number,
                "model_version": version.model_version,
                "adapter": version.adapter,
                "before": before,
                "gate": gate,
            }
        )
