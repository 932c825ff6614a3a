"""`manage.py gate --candidate N | --guardian-version N`: the regression gate's report on
activating policy version N against the active one, or guardian model version N against what
runs on its adapter use now; exit 1 when the gate refuses, 3 when it cannot decide on the
examples it has (a guardian model version: too few to tell; activation then needs an override
reason too), 0 when it passes (for CI pipelines)."""

import json
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation import gettext as _

from guardian_core.models import PolicyVersion
from guardian_core.said import worded
from policies.guardian_gate import guardian_model_gate_report
from policies.learning import LearningError
from policies.model_versions import guardian_model_version_get
from policies.policy_gate import gate_report

# The exit status when the gate cannot decide: not 2, which argparse uses for a bad command line.
UNDECIDED = 3


class Command(BaseCommand):
    help = (
        "Compare policy version N (--candidate N) with the active one, or guardian model "
        "version N (--guardian-version N) with what runs on its adapter use now, on the "
        "labelled examples: per condition ECE, Brier, band rate and expected cost, and the "
        "examples whose outcome flips; for a guardian model version, every figure paired, with "
        "its 95 % interval at the live prior. Exit 1 when the gate refuses, 3 when it cannot "
        "decide on so few examples, 0 when it passes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--candidate", type=int, metavar="N", help="a policy version")
        parser.add_argument(
            "--guardian-version", type=int, metavar="N", help="a guardian model version"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options) -> None:
        candidate, guardian = options["candidate"], options["guardian_version"]
        if (candidate is None) == (guardian is None):
            raise CommandError(
                _(
                    "give exactly one of --candidate N (a policy version) or --guardian-version "
                    "N (a guardian model version)"
                )
            )
        if candidate is not None:
            version = PolicyVersion.objects.filter(number=candidate).first()
            if version is None:
                raise CommandError(
                    _("--candidate: no policy version %(number)s") % {"number": candidate}
                )
            report = gate_report(candidate=version)
        else:
            try:
                model = guardian_model_version_get(number=guardian)
            except LearningError as exc:
                raise CommandError(f"--guardian-version: {exc}") from exc
            report = guardian_model_gate_report(candidate=model)
        if options["json"]:
            self.stdout.write(_dumps(report))
        elif candidate is not None:
            self._table(report)
        else:
            self._guardian_table(report)
        if report["refused"]:
            sys.exit(1)
        if report.get("undecided"):
            sys.exit(UNDECIDED)

    def _table(self, report: dict) -> None:
        out = self.stdout.write
        out(f"candidate v{report['candidate']} against active v{report['current']}")
        if report.get("note"):
            out(worded(report["note"]))
        examples = report.get("examples")
        if examples:
            share = examples["near_miss_share"]
            out(
                f"examples: {examples['used']} of {examples['available']}"
                + (f", near-misses {share:.0%}" if share is not None else "")
            )
        self._conditions(report)
        if "expected_cost" in report:
            cost = report["expected_cost"]
            out(f"expected cost: {_num(cost['current'])} → {_num(cost['candidate'])}")
        self._verdict(report)

    def _guardian_table(self, report: dict) -> None:
        out = self.stdout.write
        current = (
            f"active version {report['current']} ({report['current_model_version']})"
            if report["current"] is not None
            else f"the {report['adapter']} adapter as it ships"
        )
        out(
            f"guardian model version {report['candidate']} "
            f"({report['candidate_model_version']}) against {current}, at policy version "
            f"{report['policy_version'] or '—'}"
        )
        if report.get("note"):
            out(worded(report["note"]))
        examples = report["examples"]
        out(
            f"examples: {examples['used']} of {examples['available']} "
            f"({examples['learnt_by_candidate']} learnt from by the candidate and "
            f"{examples['learnt_by_current']} by the active version left out"
            + (", newest kept" if examples["capped"] else "")
            + ")"
        )
        if report.get("replicates"):
            out(
                f"paired bootstrap, {report['replicates']} replicates: current → candidate, "
                "difference [95 % interval]"
            )
        for name, row in report["conditions"].items():
            prior = row.get("prior")
            out(
                f"  {name} (n={row.get('paired_n', row['n'])}"
                + (f", at {worded(prior['words'])}" if prior else "")
                + ")"
            )
            for key, f in (row.get("figures") or {}).items():
                out(f"    {key}: {_paired(f)}")
        for key, label in (
            ("expected_cost", "expected cost"),
            ("escalation_rate", "escalation rate"),
            ("band_rate", "band rate"),
        ):
            if key in report:
                value = report[key]
                out(f"{label}: {_num(value['current'])} → {_num(value['candidate'])}")
        hourly = report.get("escalations_per_hour")
        if hourly and hourly["candidate"] is not None:
            out(
                f"escalations per hour: about {_num(hourly['current'])} → "
                f"{_num(hourly['candidate'])} over the last "
                f"{worded(hourly['span_words'])} of traffic (capacity {hourly['capacity']})"
            )
        out(f"outcome flips: {len(report['flips'])}")
        if report["refused"]:
            out("REFUSED:")
            reasons = report["reasons"]
        elif report.get("undecided"):
            out("UNDECIDED (too few examples; activation needs an override reason):")
            reasons = report["undecided_reasons"]
        else:
            out("passes")
            reasons = []
        for reason in reasons:
            out(f"  - {worded(reason)}")
        for warning in report.get("limit_warnings", []):
            out(f"  warning: {worded(warning)}")
        for caution in report.get("cautions", []):
            out(f"  caution: {worded(caution)}")

    def _conditions(self, report: dict) -> None:
        for name, row in report["conditions"].items():
            cells = ", ".join(
                f"{key} {_num(v['current'])} → {_num(v['candidate'])}"
                for key, v in row.items()
                if key not in ("n", "unscored")
            )
            self.stdout.write(f"  {name} (n={row['n']}): {cells}")

    def _verdict(self, report: dict) -> None:
        out = self.stdout.write
        out(f"outcome flips: {len(report['flips'])}")
        out("REFUSED:" if report["refused"] else "passes")
        for reason in report["reasons"]:
            out(f"  - {worded(reason)}")


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _paired(f: dict) -> str:
    if f["difference"] is None:
        return f"{_num(f['current'])} → {_num(f['candidate'])} (not defined on these examples)"
    significant = "significant" if f["significant"] else "not significant"
    verdict = f", {f['verdict'].replace('_', ' ')}" if f.get("verdict") else ""
    return (
        f"{_num(f['current'])} → {_num(f['candidate'])}, {f['difference']:+.4f} "
        f"[{f['low']:+.4f}, {f['high']:+.4f}] {significant}{verdict}"
    )


def _dumps(report: dict) -> str:
    return json.dumps(report, indent=2)
