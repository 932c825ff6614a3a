"""`manage.py import_examples FILE.jsonl [--dry-run]`: labelled traces in as labelled examples
(source `import`), all or nothing, never twice (escalations/examples.py)."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from escalations.examples import ExamplesImportError, examples_import, problem_text
from guardian_core.trace_files import EvaluationError, trace_file_lines


class Command(BaseCommand):
    help = (
        "Import a JSON Lines trace file (DESIGN.md's format; the app's export reads back) as "
        "labelled examples with source 'import', checked as `evaluate` checks traces. Any "
        "malformed line refuses the whole file (every one is listed by line number) and stores "
        "nothing; a line already stored, whatever its source (same condition, projection, label, "
        "probability, question set and model), is counted as a duplicate, not stored again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE.jsonl", help="the trace file")
        parser.add_argument("--dry-run", action="store_true", help="check and count, store nothing")

    def handle(self, *args, **options) -> None:
        try:
            result = examples_import(
                lines=trace_file_lines(options["file"]), dry_run=options["dry_run"]
            )
        except EvaluationError as exc:
            raise CommandError(str(exc).replace("--traces: ", ""), returncode=2) from exc
        except ExamplesImportError as exc:
            for problem in exc.problems:
                self.stderr.write(f"  {problem_text(problem)}")
            raise CommandError(
                f"{options['file']}: refused, nothing imported ({len(exc.problems)} "
                f"problem{'s' if len(exc.problems) != 1 else ''}, listed above)",
                returncode=1,
            ) from exc
        verb = "would import" if result.dry_run else "imported"
        per = ", ".join(f"{name} {count}" for name, count in sorted(result.by_condition.items()))
        self.stdout.write(
            f"{options['file']}: {counted(result.lines, 'line')}; {verb} "
            f"{counted(result.imported, 'example')}"
            + (f" ({per})" if per else "")
            + f"; {counted(result.duplicates, 'duplicate')} not imported (already stored); "
            f"{result.blank_lines} blank"
        )


def counted(count: int, word: str) -> str:
    """ "1 example", "3 examples", "0 examples"."""
    return f"{count} {word}{'' if count == 1 else 's'}"
