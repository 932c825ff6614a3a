"""`manage.py gate --candidate N`: the regression gate's report on activating policy version N
against the active one; exit 1 when the gate refuses (for CI pipelines), 0 when it passes."""

import json
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from guardian_core.models import PolicyVersion
from guardian_core.policy_gate import gate_report


class Command(BaseCommand):
    help = (
        "Compare policy version N with the active one on the labelled examples: per condition "
        "ECE, Brier, band rate and expected cost, and the examples whose outcome flips. "
        "Exit 1 when the gate refuses, 0 when it passes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--candidate", type=int, required=True, metavar="N")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, candidate: int, json: bool = False, **options) -> None:
        version = PolicyVersion.objects.filter(number=candidate).first()
        if version is None:
            raise CommandError(f"--candidate: no policy version {candidate}")
        report = gate_report(candidate=version)
        if json:
            self.stdout.write(_dumps(report))
        else:
            self._table(report)
        if report["refused"]:
            sys.exit(1)

    def _table(self, report: dict) -> None:
        out = self.stdout.write
        out(f"candidate v{report['candidate']} against active v{report['current']}")
        if report.get("note"):
            out(report["note"])
        examples = report.get("examples")
        if examples:
            share = examples["near_miss_share"]
            out(
                f"examples: {examples['used']} of {examples['available']}"
                + (f", near-misses {share:.0%}" if share is not None else "")
            )
        for name, row in report["conditions"].items():
            cells = ", ".join(
                f"{key} {_num(v['current'])} → {_num(v['candidate'])}"
                for key, v in row.items()
                if key != "n"
            )
            out(f"  {name} (n={row['n']}): {cells}")
        if "expected_cost" in report:
            cost = report["expected_cost"]
            out(f"expected cost: {_num(cost['current'])} → {_num(cost['candidate'])}")
        out(f"outcome flips: {len(report['flips'])}")
        out("REFUSED:" if report["refused"] else "passes")
        for reason in report["reasons"]:
            out(f"  - {reason}")


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _dumps(report: dict) -> str:
    return json.dumps(report, indent=2)
