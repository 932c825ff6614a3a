"""`manage.py backup PATH`: a consistent copy of the database, taken while everything runs
(pg_dump on PostgreSQL, SQLite's online backup on the embedded default; runs/backup.py)."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.backup import BackupError, backup_create


class Command(BaseCommand):
    help = (
        "Write a consistent backup of the database to PATH while the web server and workers "
        "run: a pg_dump custom archive (PostgreSQL; run it as the tables' owner) or a SQLite "
        "file. It does not hold the decision log's key (GUARDIAN_LOG_KEY): keep that apart."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path, help="the file to write (must not exist)")
        parser.add_argument(
            "--pg-bin", default=None, help="folder of pg_dump (default: PATH, then "
            "/usr/lib/postgresql/*/bin, newest first)"
        )  # fmt: skip

    def handle(self, *args, path: Path, pg_bin: str | None, **options) -> None:
        try:
            result = backup_create(path, pg_bin=pg_bin)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"backup of the {result.vendor} database written to {result.path} "
            f"({result.size} bytes, {result.tool}); the log's key is not in it"
        )
