"""`manage.py restore PATH [--force]`: a backup made by `backup` into the configured database,
which must be empty unless forced (runs/backup.py)."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.backup import BackupError, restore_into


class Command(BaseCommand):
    help = (
        "Restore a backup made by `backup` into the database DATABASE_URL names, refused if "
        "it holds any table unless --force. Stop the web server, workers and beat first; on "
        "PostgreSQL run it as the tables' owner. Then: migrate (if the code is newer) and "
        "verify_log --all with the same GUARDIAN_LOG_KEY as the backup's database."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path, help="the backup file")
        parser.add_argument(
            "--force",
            action="store_true",
            help="overwrite a database that is not empty (PostgreSQL: pg_restore --clean; "
            "SQLite: the file is replaced)",
        )
        parser.add_argument("--pg-bin", default=None, help="folder of pg_restore")

    def handle(self, *args, path: Path, force: bool, pg_bin: str | None, **options) -> None:
        try:
            result = restore_into(path, force=force, pg_bin=pg_bin)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"restored {path} into the {result.vendor} database ({result.tool})")
        if result.app_role_granted:
            self.stdout.write(f"the app's role {result.app_role_granted} granted its rights")
        if result.unapplied_migrations:
            self.stdout.write(
                f"the backup is from an older release: {len(result.unapplied_migrations)} "
                "migrations to apply; run manage.py migrate"
            )
        self.stdout.write("now check the log: manage.py verify_log --all")
