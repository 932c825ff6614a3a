"""Backup and restore of Guardian's database: pg_dump / pg_restore on PostgreSQL, SQLite's
online backup API on the embedded default (docs/backup.md says the whole procedure).

Both copies are consistent while the workers write: pg_dump reads one snapshot, and SQLite's
backup copies every page in one step under a read transaction. Neither carries the decision
log's key (GUARDIAN_LOG_KEY, or the SECRET_KEY it is derived from): it lives outside the
database on purpose, and a restored log verifies only under the key that sealed it.

A restore goes into an empty database and refuses one holding any table unless forced. On
PostgreSQL it restores as the role that runs it (the tables' owner, the role that migrates):
no owner and no grant is taken from the archive, since roles belong to the cluster, not the
database; the app's role (GUARDIAN_DB_APP_ROLE) is granted its rights again afterwards exactly
as `migrate` grants them (runs/db_roles.py). The log's triggers and the purge door's
functions (SECURITY DEFINER, owned by the restoring role) come back with the schema.
"""

import glob
import os
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from runs.db_roles import app_role_grant

# The first bytes of each kind of backup file.
SQLITE_MAGIC = b"SQLite format 3\x00"
PG_CUSTOM_MAGIC = b"PGDMP"
# Where Debian and Ubuntu install the PostgreSQL client of each major version.
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"


class BackupError(Exception):
    """A backup or restore that cannot be done, said in words for the operator."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    vendor: str
    size: int
    tool: str


@dataclass(frozen=True)
class RestoreResult:
    vendor: str
    tool: str
    unapplied_migrations: list[str]
    app_role_granted: str


def pg_tool(name: str, *, bin_dir: str | None = None) -> str:
    """The path of the PostgreSQL client program `name` (pg_dump, pg_restore): in `bin_dir`
    when given, else on PATH, else the newest under /usr/lib/postgresql/*/bin."""
    if bin_dir:
        candidate = Path(bin_dir) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise BackupError(f"no executable {name} in {bin_dir}")
    found = shutil.which(name)
    if found:
        return found

    def major(path: str) -> int:
        version = Path(path).parent.parent.name
        return int(version) if version.isdigit() else 0

    for folder in sorted(glob.glob(PG_BIN_GLOB), key=major, reverse=True):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise BackupError(
        f"{name} was not found on PATH nor under {PG_BIN_GLOB}: install the PostgreSQL client "
        "(Debian: apt-get install postgresql-client, of the server's major version or newer) "
        "or name its folder with --pg-bin"
    )


def _pg_env(settings_dict: dict) -> dict[str, str]:
    """The libpq environment that reaches the database `settings_dict` names (the password
    goes in the environment, never on a command line another user could read)."""
    env = dict(os.environ)
    pairs = {
        "PGHOST": settings_dict.get("HOST"),
        "PGPORT": settings_dict.get("PORT"),
        "PGUSER": settings_dict.get("USER"),
        "PGPASSWORD": settings_dict.get("PASSWORD"),
        "PGDATABASE": settings_dict.get("NAME"),
    }
    options = settings_dict.get("OPTIONS") or {}
    for option, variable in (
        ("sslmode", "PGSSLMODE"),
        ("sslrootcert", "PGSSLROOTCERT"),
        ("sslcert", "PGSSLCERT"),
        ("sslkey", "PGSSLKEY"),
        ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ):
        pairs[variable] = options.get(option)
    for variable, value in pairs.items():
        if value not in (None, ""):
            env[variable] = str(value)
    return env


def _run(command: list[str], *, env: dict[str, str], what: str) -> None:
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip()
        raise BackupError(f"{what} failed (exit {completed.returncode}): {detail}")


def _sqlite_path(settings_dict: dict) -> Path:
    return Path(settings_dict["NAME"])


def backup_create(path: Path, *, using: str = "default", pg_bin: str | None = None) -> BackupResult:
    """Write a consistent copy of database `using` to `path` (refused if it exists): a pg_dump
    custom-format archive on PostgreSQL, a SQLite database file on SQLite. Safe while the web
    server and the workers run."""
    path = Path(path)
    if path.exists():
        raise BackupError(f"{path} exists already; a backup never overwrites a file")
    connection = connections[using]
    settings_dict = connection.settings_dict
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    if connection.vendor == "postgresql":
        tool = pg_tool("pg_dump", bin_dir=pg_bin)
        # One snapshot of the whole database; owners and grants are kept in the archive (a
        # restore leaves them out, see restore_into), large objects too.
        command = [tool, "--format=custom", "--no-password", f"--file={partial}"]
        _run(command, env=_pg_env(settings_dict), what="pg_dump")
    elif connection.vendor == "sqlite":
        tool = "sqlite3 online backup"
        _sqlite_copy(_sqlite_path(settings_dict), partial)
    else:
        raise BackupError(f"no backup for the {connection.vendor} database")
    partial.replace(path)
    return BackupResult(path=path, vendor=connection.vendor, size=path.stat().st_size, tool=tool)


def _sqlite_copy(source: Path, target: Path) -> None:
    """Copy SQLite database `source` into `target` with the online backup API, in one step
    (pages=-1: one read transaction, so the copy is one moment of the source while others
    write), then check the copy's integrity."""
    if not source.is_file():
        raise BackupError(f"no SQLite database at {source}")
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst, pages=-1)
            # The copy stands alone: no -wal file beside it to lose on the way to storage.
            dst.execute("PRAGMA journal_mode=DELETE")
            (result,) = dst.execute("PRAGMA integrity_check").fetchone()
        finally:
            dst.close()
    finally:
        src.close()
    if result != "ok":
        target.unlink(missing_ok=True)
        raise BackupError(f"the copy of {source} failed its integrity check: {result}")


def backup_kind(path: Path) -> str:
    """'postgresql' or 'sqlite' by the file's first bytes; BackupError for anything else."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc}") from None
    if head.startswith(PG_CUSTOM_MAGIC):
        return "postgresql"
    if head == SQLITE_MAGIC:
        return "sqlite"
    raise BackupError(f"{path} is neither a pg_dump custom archive nor a SQLite database")


def database_tables(using: str = "default") -> list[str]:
    """The tables in database `using` (its schema on PostgreSQL), whoever made them."""
    connection = connections[using]
    if connection.vendor == "sqlite":
        path = _sqlite_path(connection.settings_dict)
        if not path.exists() or path.stat().st_size == 0:
            return []
    with connection.cursor() as cursor:
        return sorted(connection.introspection.table_names(cursor))


def restore_into(
    path: Path, *, using: str = "default", force: bool = False, pg_bin: str | None = None
) -> RestoreResult:
    """Restore backup `path` into database `using`, which must be empty unless `force`.
    Stop the web server, the workers and beat first. On PostgreSQL run it as the tables'
    owner (the role that migrates); GUARDIAN_DB_APP_ROLE, when set, gets its rights again."""
    path = Path(path)
    connection = connections[using]
    kind = backup_kind(path)
    if kind != connection.vendor:
        raise BackupError(
            f"{path} is a {kind} backup and the database is {connection.vendor}: a backup "
            "restores into the same kind of database"
        )
    tables = database_tables(using)
    if tables and not force:
        raise BackupError(
            f"the database is not empty ({len(tables)} tables, e.g. {', '.join(tables[:3])}); "
            "restore into a fresh database, or pass --force to overwrite it"
        )
    settings_dict = connection.settings_dict
    connection.close()
    granted = ""
    if kind == "postgresql":
        tool = pg_tool("pg_restore", bin_dir=pg_bin)
        command = [
            tool,
            "--no-password",
            "--no-owner",  # everything belongs to the role restoring: the tables' owner
            "--no-acl",  # roles are the cluster's; the app's role is granted below
            "--exit-on-error",
            "--single-transaction",
            f"--dbname={settings_dict['NAME']}",
        ]
        if force:
            command += ["--clean", "--if-exists"]
        _run([*command, str(path)], env=_pg_env(settings_dict), what="pg_restore")
        role = settings.GUARDIAN_DB_APP_ROLE
        if role:
            app_role_grant(connection, role)
            granted = role
    else:
        tool = "sqlite3 online backup"
        target = _sqlite_path(settings_dict)
        # The old file (empty, or forced) goes whole with its write-ahead log: none of its
        # pages may outlive the restore, and the copy starts from no file at all.
        for old in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
            old.unlink(missing_ok=True)
        _sqlite_copy(path, target)
    connection.close()
    return RestoreResult(
        vendor=kind,
        tool=tool,
        unapplied_migrations=unapplied_migrations(using),
        app_role_granted=granted,
    )


def unapplied_migrations(using: str = "default") -> list[str]:
    """The code's migrations the database has not applied ('app.name'): a backup of an
    older release needs `migrate` after its restore."""
    executor = MigrationExecutor(connections[using])
    targets = executor.loader.graph.leaf_nodes()
    return [
        f"{migration.app_label}.{migration.name}"
        for migration, _backwards in executor.migration_plan(targets)
    ]
