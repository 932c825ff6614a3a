"""`manage.py recalibrate [--condition C ...] [--model local] [--activate]`: a calibration map
per condition fitted on the labelled examples, as a new guardian model version."""

import json
import math

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation import gettext as _

from guardian_core.engine.calibration import DEFAULT_SEED, HELD_OUT_SHARE
from guardian_core.engine.conditions import Condition
from guardian_core.engine.priors import prior_table
from guardian_core.models import GuardianAdapter, GuardianModelVersion
from policies.learning import (
    LearningError,
    guardian_model_activate,
    guardian_model_recalibrate,
)
from policies.management.commands.evaluate import _progress_bar


class Command(BaseCommand):
    help = (
        "Fit a calibration map per condition (isotonic or Platt, the lower log-loss on a "
        f"held-out {HELD_OUT_SHARE:.0%} of the examples, fixed seed) over the chosen guardian's "
        "probabilities of the labelled examples (reviewers' verdicts, the judge's, imports), "
        "and save it as a new guardian model version, inactive unless --activate. Prints the "
        "held-out ECE, Brier and log-loss before and after per condition. Refuses a condition "
        "with too few examples or one class only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--condition",
            action="append",
            choices=[c.value for c in Condition],
            help="a condition to recalibrate (repeatable; default: every condition with "
            "labelled examples)",
        )
        parser.add_argument(
            "--model",
            default=GuardianAdapter.LOCAL,
            choices=GuardianAdapter.values,
            help="the guardian adapter the map sits on (default local)",
        )
        parser.add_argument(
            "--over",
            type=int,
            metavar="N",
            help="stack the maps on guardian model version N of the same adapter (say a "
            "retrained local guardian) instead of the adapter as it ships",
        )
        parser.add_argument(
            "--live-prior",
            action="append",
            default=[],
            metavar="CONDITION=SHARE",
            help="the traffic's share of positives for a condition, e.g. integrity=0.05 "
            "(repeatable); else GUARDIAN_LIVE_PRIORS, the audit sample or the traffic's scores",
        )
        parser.add_argument(
            "--include-judge",
            action="store_true",
            help="learn from the second-tier judge's labels too (default: people's only)",
        )
        parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the split's seed")
        parser.add_argument(
            "--activate",
            action="store_true",
            help="activate the new version at once (as `activate_guardian_model N` does)",
        )
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args, **options) -> None:
        try:
            version = guardian_model_recalibrate(
                adapter=options["model"],
                conditions=options["condition"],
                over=options["over"],
                include_judge=options["include_judge"],
                live_priors=live_priors_option(options["live_prior"]),
                seed=options["seed"],
                progress=_progress_bar(self.stderr),
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


def live_priors_option(pairs: list[str]) -> dict[str, float]:
    """--live-prior CONDITION=SHARE flags as {condition: prior}; CommandError names every bad
    one."""
    table, problems = {}, []
    for pair in pairs:
        name, sep, share = pair.partition("=")
        try:
            table[name.strip()] = float(share) if sep else math.nan
        except ValueError:
            problems.append(_("%(pair)s: the share must be a number") % {"pair": pair})
    try:
        stated = prior_table(table)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise CommandError("--live-prior: " + "; ".join(problems), returncode=2)
    return stated


def version_summary(version: GuardianModelVersion) -> dict:
    return {
        "number": version.number,
        "model_version": version.model_version,
        "over": version.over.number if version.over_id else None,
        "adapter": version.adapter,
        "kind": version.kind,
        "base_model_version": version.base_model_version,
        "active": version.is_active,
        "examples": len(version.example_ids),
        "examples_digest": version.examples_digest,
        "figures": version.figures,
    }


# Under this many held-out rows an ECE or Brier moves a lot with one example: said beside it.
FEW_HELD_OUT = 30


def _prior_line(prior: dict, at_live: dict | None) -> str:
    """Where the map learnt and where it answers: the labelled share, the live prior."""
    learnt = f"learnt at {prior['fitted']:.3f} positives"
    live = prior.get("live")
    if not live:
        return f"{learnt}; answers there too: {prior.get('note', 'no live prior known')}"
    source = {"stated": "stated", "audit_sample": "audit sample", "traffic_em": "traffic, EM"}
    line = (
        f"{learnt}; answers at the live prior {live['value']:.3f} (95 %: {live['low']:.3f}–"
        f"{live['high']:.3f}; {source.get(live['source'], live['source'])}"
        + (f", n={live['n']}" if live["n"] else "")
        + ")"
    )
    if at_live:
        line += f"; held-out ECE at it {at_live['ece']:.3f}"
    return line


def _paired_line(figures: dict) -> str:
    """The held-out before → after with the 95 % interval of each difference, and whether
    it is beyond the noise of so few rows."""
    words = {"ece": "ECE", "expected_cost": "cost", "benign_flagged": "flagged", "missed": "missed"}
    parts = []
    for name, label in words.items():
        f = figures.get(name)
        if not f or f["difference"] is None or f["low"] is None:
            continue
        beyond = "" if f["significant"] else ", within the noise"
        interval = f"95 %: {f['low']:+.3f} to {f['high']:+.3f}"
        parts.append(
            f"{label} {f['current']:.3f} → {f['candidate']:.3f} "
            f"(difference {f['difference']:+.3f}, {interval}{beyond})"
        )
    return "; ".join(parts)


def version_table(version: GuardianModelVersion) -> str:
    """The version and, per condition, the held-out figures before → after."""
    state = (
        "active"
        if version.is_active
        else "inactive: activate_guardian_model " + str(version.number)
    )
    out = [
        f"Guardian model version {version.number}: {version.model_version} ({version.kind}, "
        f"{state}); learnt from {len(version.example_ids)} "
        f"example{'' if len(version.example_ids) == 1 else 's'} "
        f"(digest {version.examples_digest[:12]})",
        "",
        f"{'condition':<13}{'method':>9}{'fit':>6}{'held':>6}"
        f"{'ECE before':>12}{'after':>7}{'Brier before':>14}{'after':>7}",
    ]
    for name, f in version.figures.items():
        before, after = f.get("before"), f.get("after")
        if before is None:
            out.append(
                f"{name:<13}  "
                + _("taught %(count)s, too few to hold any out") % {"count": f.get("taught", 0)}
            )
            continue
        out.append(
            f"{name:<13}{f.get('method', '—'):>9}{f.get('n_fit', f.get('taught', 0)):>6}"
            f"{f['n_held_out']:>6}{before['ece']:>12.3f}{after['ece']:>7.3f}"
            f"{before['brier']:>14.3f}{after['brier']:>7.3f}"
        )
        if f["n_held_out"] < FEW_HELD_OUT:
            out.append(
                f"{'':<13}  "
                + _("on %(count)s held-out rows: read as a rough sign") % {"count": f["n_held_out"]}
            )
        prior = f.get("prior")
        if prior:
            out.append(f"{'':<13}  {_prior_line(prior, f.get('after_at_live_prior'))}")
        paired = (f.get("held_out_paired") or {}).get("figures", {})
        if paired:
            out.append(f"{'':<13}  {_paired_line(paired)}")
    out += [
        "",
        _(
            "Figures are on the held-out examples only (none of them fed the version); ECE over "
            "the harness's equal-width bins."
        ),
    ]
    return "\n".join(out)
