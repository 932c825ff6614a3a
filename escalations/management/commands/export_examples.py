"""`manage.py export_examples [--condition X] [--since DATE] [--until DATE] [--source S]
[--output FILE]`: the labelled examples as JSON Lines in the trace format of DESIGN.md."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from escalations.examples import example_filters_from, labelled_examples_jsonl
from escalations.models import ExampleSource
from guardian_core.engine.conditions import Condition


class Command(BaseCommand):
    help = (
        "Write the labelled examples as JSON Lines (the trace format), oldest first, to stdout "
        "or --output; the same lines as the examples page's download."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--condition", default="", help=f"one of {', '.join(Condition)}")
        parser.add_argument(
            "--since", default="", metavar="DATE", help="from this local date on (YYYY-MM-DD)"
        )
        parser.add_argument(
            "--until", default="", metavar="DATE", help="up to this local date, inclusive"
        )
        parser.add_argument(
            "--source", default="", help=f"one of {', '.join(ExampleSource.values)}"
        )
        parser.add_argument(
            "--output", default="-", metavar="FILE", help="where to write (default: stdout)"
        )

    def handle(self, *args, **options) -> None:
        filters, problems = example_filters_from(options)
        if problems:
            raise CommandError(
                "; ".join(f"--{field}: {problem}" for field, problem in problems.items())
            )
        lines = labelled_examples_jsonl(filters)
        target = options["output"]
        if target == "-":
            count = 0
            for line in lines:
                self.stdout.write(line, ending="")
                count += 1
            # stdout holds the JSON Lines only; the count goes to stderr.
            self.stderr.write(f"{_counted(count)} written", style_func=str)
            return
        # Written beside the target and renamed over it, so a failed export never leaves half
        # a file where a complete one was expected.
        partial = Path(f"{target}.partial")
        try:
            with partial.open("w", encoding="utf-8", newline="\n") as out:
                count = 0
                for line in lines:
                    out.write(line)
                    count += 1
            partial.replace(target)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise CommandError(
                f"--output: cannot write {target!r}: {exc.strerror or exc}"
            ) from None
        self.stdout.write(f"{_counted(count)} written to {target}")


def _counted(count: int) -> str:
    return f"{count} example{'' if count == 1 else 's'}"
