"""`manage.py evaluate --traces FILE.jsonl`: measure a guardian's probabilities on labelled
traces, per condition, at a policy version's thresholds (a table, or the report as JSON)."""

import json
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from guardian_core.engine.evaluation import DEFAULT_BINS
from guardian_core.trace_files import trace_file_lines
from policies.harness import ALL_MODELS, NETWORK_CONCURRENCY, EvaluationError, traces_evaluate


class Command(BaseCommand):
    help = (
        "Evaluate labelled traces (DESIGN.md's JSON Lines format) per condition: n, ECE, Brier, "
        "AUROC, accuracy, the reliability curve, and at the policy's t* and δ the fire, band, "
        "false-stop and false-continue rates, the expected cost and (risk) ungated calls. "
        "Rows without a probability are scored by --model. Exit 1 when no line is valid."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--traces", required=True, help="a JSON Lines trace file")
        parser.add_argument(
            "--model",
            choices=ALL_MODELS,
            help="the guardian that scores rows without a probability (else they are listed "
            "as unscored), as its runs answer now: as its active guardian model version when "
            "one is active (--base: as it ships); local in process; http and openai as runs "
            "build them from settings (GUARDIAN_HTTP_*, OPENAI_*), asked row by row, "
            f"{NETWORK_CONCURRENCY} at a time, with the policy version's questions",
        )
        parser.add_argument(
            "--base",
            action="store_true",
            help="score with the --model adapter as it ships, not as its active guardian model "
            "version (which is what its runs answer with now, and the default)",
        )
        parser.add_argument(
            "--guardian-version",
            type=int,
            metavar="N",
            help="score as guardian model version N (recalibrated or retrained, active or not: "
            "measure a candidate before `activate_guardian_model N`); its adapter is the "
            "model, so --model may be left out. Add --rescore to score rows that carry a "
            "probability too",
        )
        parser.add_argument(
            "--policy",
            type=int,
            metavar="VERSION",
            help="the policy version number whose t*, δ and costs apply (default: the active one)",
        )
        parser.add_argument("--json", action="store_true", help="print the full report as JSON")
        parser.add_argument(
            "--bins",
            type=int,
            default=DEFAULT_BINS,
            help=f"equal-width bins of ECE and the reliability curve (default {DEFAULT_BINS})",
        )
        parser.add_argument(
            "--rescore",
            action="store_true",
            help="score every row with --model, even those that carry a probability",
        )

    def handle(self, *args, **options) -> None:
        try:
            report = traces_evaluate(
                lines=trace_file_lines(options["traces"]),
                model=options["model"],
                policy_number=options["policy"],
                bins=options["bins"],
                rescore=options["rescore"],
                progress=_progress_bar(self.stderr),
                guardian_version=options["guardian_version"],
                base=options["base"],
            )
        except EvaluationError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        if options["json"]:
            self.stdout.write(json.dumps(report, ensure_ascii=False, indent=2))
        else:
            self.stdout.write(report_table(report))
        if report["valid_lines"] == 0:
            raise CommandError(
                f"{options['traces']}: no valid trace line ({len(report['malformed'])} "
                "malformed, listed above)",
                returncode=1,
            )


def _progress_bar(stream):
    """A progress callback (done, total) drawing on `stream`: on a terminal, tqdm when it is
    installed, else a counter that rewrites one line; piped or logged, whole lines."""
    tqdm = None
    if stream.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
    state: dict = {}

    def progress(done: int, total: int) -> None:
        if total == 0:
            return
        if tqdm is not None:
            bar = state.get("bar")
            if bar is None:
                bar = state["bar"] = tqdm(total=total, desc="scoring", unit="row", file=sys.stderr)
            bar.update(done - bar.n)
            if done >= total:
                bar.close()
            return
        if not stream.isatty():
            # Piped or logged: "\r" rewrites nothing there, so whole lines, about one a tenth.
            step = total // 10 + 1
            if done == 0 or done >= total or done // step != state.get("last", -1):
                state["last"] = done // step
                stream.write(f"scoring {done}/{total} rows")
            return
        stream.write(f"\rscoring {done}/{total} rows", ending="\n" if done >= total else "")
        stream.flush()

    return progress


def _f(value: object, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


COLUMNS = (
    ("condition", 12),
    ("n", 6),
    ("unscored", 8),
    ("ECE", 6),
    ("Brier", 6),
    ("AUROC", 6),
    ("acc", 6),
    ("t*", 5),
    ("δ", 5),
    ("fire", 6),
    ("band", 6),
    ("f.stop", 6),
    ("f.cont", 6),
    ("cost", 6),
    ("ungated", 11),
)


POSITIVES_READING = {
    "too_few": " (too few to tell)",
    "dependent": ": their errors overlap beyond noise",
    "catches": ": the guardian misses less where the actor is wrong, beyond noise",
    "no_difference": ": no difference beyond noise",
}


def _interval(pair: list | None, digits: int = 3) -> str:
    return f"[{pair[0]:.{digits}f}, {pair[1]:.{digits}f}]" if pair else "[—]"


def correlated_errors_lines(report: dict) -> list[str]:
    """Per condition whose rows say whether the actor was wrong (`actor_wrong`): the guardian's
    miss rate on actor-wrong rows, its fire rate on actor-right ones, the difference of miss
    rates (wrong − right) and phi(missed, wrong), each with its interval, and the reading."""
    measured = [
        (name, e, c.get("correlated_errors_on_positives"))
        for name, c in report["conditions"].items()
        if (e := c.get("correlated_errors"))
    ]
    if not measured:
        return []
    confidence = measured[0][1]["confidence"]
    out = [
        "",
        f"Correlated errors (rows with actor_wrong; {confidence:.0%} intervals: Wilson for the "
        "rates, a bootstrap over runs for the difference and phi):",
    ]
    for name, e, positives in measured:
        out.append(
            f"  {name}: actor wrong on {e['wrong']} rows, guardian missed "
            f"{_f(e['miss_rate_on_wrong'])} {_interval(e['miss_interval_on_wrong'])}; "
            f"actor right on {e['right']} rows, guardian fired {_f(e['fire_rate_on_right'])} "
            f"{_interval(e['fire_interval_on_right'])}; miss-rate difference (wrong − right) "
            f"{_f(e['difference'])} {_interval(e['difference_interval'])}; "
            f"phi(missed, wrong) {_f(e['phi'])} {_interval(e['phi_interval'])}; "
            f"{e['runs']} runs"
        )
        out.append(f"    {e['sentence']}")
        if e["caution"]:
            out.append(f"    Caution: {e['caution']}")
        if positives:
            out.append(
                f"    On the {positives['wrong'] + positives['right']} positive rows only (every "
                f"miss an error): missed {_f(positives['miss_rate_on_wrong'])} where the actor "
                f"was wrong, {_f(positives['miss_rate_on_right'])} where it was right; "
                f"difference {_f(positives['difference'])} "
                f"{_interval(positives['difference_interval'])}"
                + POSITIVES_READING[positives["reading"]]
            )
    return out


def _scored_by(report: dict) -> str:
    """Which guardian scored, in words: the adapter's active version, one named, or the
    adapter as it ships (and then whether runs answer otherwise)."""
    model, chosen = report["model"], report.get("guardian_model") or {}
    number, active = chosen.get("number"), chosen.get("active")
    if chosen.get("chosen") == "active":
        how = f"as guardian model version {number}, the active one (--base: as it ships)"
    elif chosen.get("chosen") == "named":
        how = f"as guardian model version {number}" + (
            ", the active one" if number == active else ""
        )
    elif active is not None:
        how = f"as it ships (--base; its runs answer as guardian model version {active})"
    else:
        how = "as it ships (no guardian model version of it is active)"
    return f"scored by {model} {how}: {report['model_version']}"


def _left_out(report: dict) -> list[str]:
    """The line saying which rows a learnt version was not measured on, when it scored."""
    left = report.get("left_out")
    if not left:
        return []
    return [
        f"Left out {left['rows']} row{'' if left['rows'] == 1 else 's'} exported from the "
        f"labelled examples guardian model version {left['version']} learnt from "
        f"({left['learnt_from']} in all, with the versions it stacks on), as the gate does"
    ]


def interval_lines(report: dict) -> list[str]:
    """Each condition's ECE, Brier and AUROC with their 95 % bootstrap intervals, and a caution
    where the rows are too few to read a figure as settled."""
    lines = []
    for name, c in report["conditions"].items():
        intervals = c.get("intervals")
        if not intervals:
            continue
        parts = []
        for key, label in (("ece", "ECE"), ("brier", "Brier"), ("auroc", "AUROC")):
            value = c.get("auroc_compared", c["auroc"]) if key == "auroc" else c[key]
            if value is not None and intervals.get(key):
                low, high = intervals[key]
                parts.append(f"{label} {value:.3f} (95 %: {low:.3f}–{high:.3f})")
        line = f"{name}: " + ", ".join(parts)
        if intervals["caution"]:
            words = ", ".join(k.upper() if k != "brier" else "Brier" for k in intervals["caution"])
            line += f" — on {c['n']} rows, too few to read {words} as settled"
        lines.append(line)
    return ["", "95 % bootstrap intervals (the rows resampled):", *lines] if lines else []


def report_table(report: dict) -> str:
    """The report for a person: a line per condition, each reliability curve, then every
    malformed line and unscored row by line number."""
    model = report["model"]
    out = [
        f"Policy version {report['policy_version']}; "
        + (_scored_by(report) if model else "no model scored rows")
        + f"; {report['bins']} bins; {report['lines']} lines: {report['valid_lines']} valid, "
        f"{len(report['malformed'])} malformed, {report['blank_lines']} blank",
        *_left_out(report),
        "",
        " ".join(
            name.rjust(width) if i else name.ljust(width) for i, (name, width) in enumerate(COLUMNS)
        ),
    ]
    for name, c in report["conditions"].items():
        policy = c["policy"] or {}
        cells = [
            name,
            c["n"],
            c["unscored"],
            c["ece"],
            c["brier"],
            c["auroc"],
            c["accuracy"],
            policy.get("t_star"),
            policy.get("delta"),
            policy.get("fire_rate"),
            policy.get("band_rate"),
            policy.get("false_stop_rate"),
            policy.get("false_continue_rate"),
            policy.get("expected_cost"),
            # "2 of 58" in the words: irreversible/regulated calls let through.
            f"{policy['ungated']}/{c['positives']}" if name == "risk" and policy else "",
        ]
        out.append(
            " ".join(
                _f(cell).rjust(width) if i else str(cell).ljust(width)
                for i, (cell, (_, width)) in enumerate(zip(cells, COLUMNS, strict=True))
            )
        )
    out += [
        "",
        "ECE and Brier are over the compared probability; AUROC and acc are one-vs-rest macro "
        "and the most likely class where risk or drift rows carry distributions. f.stop is a "
        "share of the negatives, f.cont of the positives; cost is per example.",
    ]
    out += interval_lines(report)
    out += correlated_errors_lines(report)
    for name, c in report["conditions"].items():
        if not c["reliability"]:
            continue
        out += ["", f"{name}: reliability (bin, rows, mean predicted → observed)"]
        for b in c["reliability"]:
            if b["count"]:
                out.append(
                    f"  [{b['lower']:.3f}, {b['upper']:.3f})  {b['count']:>6}  "
                    f"{b['mean_predicted']:.3f} → {b['observed_rate']:.3f}"
                )
    for title, problems in (
        ("Malformed lines", report["malformed"]),
        ("Unscored rows", report["unscored"]),
    ):
        if problems:
            out += ["", f"{title} ({len(problems)}):"]
            out += [f"  line {p['line']}: {p['why']}" for p in problems]
    return "\n".join(out)
