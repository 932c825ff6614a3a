"""`make bench`: what a round costs PostgreSQL, read from PostgreSQL's own statistics.

Per round of one contender: commits (`pg_stat_database.xact_commit` of the bench's database,
read-only transactions included), rows written (its `tup_inserted + tup_updated +
tup_deleted`) and the WAL writes and syncs (`pg_stat_wal.wal_write`, `wal_sync`).

How the figures stay honest:
- A backend publishes its statistics lazily (at most once a second when idle, PostgreSQL 15),
  so every connection a contender uses is flushed (`pg_stat_force_next_flush()`, done by the
  time its ReadyForQuery arrives) before the counters are read, and each contender flushes its
  own connection at the end of its block, so another contender's window never receives its
  late counts. The flush is one transaction of its own; it is taken off the figures.
- The counters are read from a connection to another database (`postgres`), whose own
  transactions are counted there, not in the bench's database.
- `pg_stat_wal` is the cluster's, not the database's: other sessions on the same server only
  add to it. Each figure is the median over the window's rounds, so a stray write elsewhere
  does not move it on a quiet server; on a busy shared one, read the WAL figures as an upper
  bound.
- A commit asks for a WAL flush (a write and, with fsync on, an fsync) only when it wrote
  something and `synchronous_commit` is on; with it off the WAL writer flushes in the
  background and a round counts no WAL writes of its own. The settings are printed beside the
  figures (`settings_note`); `PGOPTIONS='-c synchronous_commit=on' make bench` runs both
  contenders' sessions with commits that wait for their WAL, whatever the server's default.
"""

import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

# BENCH_PG_COUNTS=off times the rounds without counting them, to see that counting (a few
# statements between counted rounds, outside their times) does not move the times.
ENABLED = os.environ.get("BENCH_PG_COUNTS", "on").strip().lower() not in {"off", "0", "no"}
OBSERVER_DATABASES = ("postgres", "template1")
READ = """
    SELECT d.xact_commit, d.tup_inserted + d.tup_updated + d.tup_deleted, w.wal_write, w.wal_sync
    FROM pg_stat_database d CROSS JOIN pg_stat_wal w
    WHERE d.datname = %s
"""
FLUSH = "SELECT pg_stat_force_next_flush() FROM pg_database LIMIT 1"


@dataclass(frozen=True)
class Counts:
    commits: float
    rows: float
    wal_writes: float
    wal_syncs: float

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def describe(self) -> str:
        return (
            f"{self.commits:g} commits, {self.rows:g} rows written, "
            f"{self.wal_writes:g} WAL writes, {self.wal_syncs:g} WAL syncs"
        )


def median_counts(rounds: Iterable[Counts]) -> Counts:
    rounds = list(rounds)
    return Counts(*(statistics.median(getattr(r, f.name) for r in rounds) for f in fields(Counts)))


class Observer:
    """Reads the bench database's counters from a connection to another database."""

    def __init__(self, conninfo: str, dbname: str) -> None:
        from psycopg import Connection, OperationalError
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        self.dbname = dbname
        params = conninfo_to_dict(conninfo)
        last: Exception | None = None
        for other in OBSERVER_DATABASES:
            try:
                self.connection = Connection.connect(
                    make_conninfo(**{**params, "dbname": other}), autocommit=True
                )
                break
            except OperationalError as exc:
                last = exc
        else:
            raise RuntimeError(f"cannot connect to {OBSERVER_DATABASES} to read counters: {last}")

    def read(self) -> Counts:
        row = self.connection.execute(READ, (self.dbname,)).fetchone()
        if row is None:
            raise RuntimeError(f"pg_stat_database has no row for {self.dbname!r}")
        return Counts(*map(int, row))

    def settings_note(self, session: Callable[[str], str]) -> str:
        """The settings that decide what a commit costs; `session(name)` reads one as the
        bench's own sessions see it (synchronous_commit may be set per session)."""
        server = {
            name: self.connection.execute(f"SHOW {name}").fetchone()[0]
            for name in ("fsync", "wal_sync_method", "full_page_writes")
        }
        return (
            f"PostgreSQL counters: fsync {server['fsync']} ({server['wal_sync_method']}), "
            f"full_page_writes {server['full_page_writes']}, synchronous_commit "
            f"{session('synchronous_commit')} in the bench's sessions; WAL counters are the "
            "whole server's"
        )

    def close(self) -> None:
        self.connection.close()


class Tally:
    """One contender's counts per round, at the rounds of the windows.

    Call `before(i)` just before round i and `after(i)` just after it, outside the timed part:
    at a counted round each flushes the contender's connection and reads the counters. Nothing
    else may use the bench's database in between (the contenders take turns in blocks).
    `statements()`, when given, is the contender's running count of statements sent, read
    before the flush so that only the flush's own statement has to be taken off."""

    def __init__(
        self,
        observer: Observer,
        flush: Callable[[], None],
        rounds: Iterable[int],
        *,
        statements: Callable[[], int] | None = None,
    ) -> None:
        self.observer = observer
        self.flush = flush
        self.rounds = set(rounds)
        self.statements = statements
        self.snapshots: dict[tuple[int, str], tuple[int, Counts]] = {}

    def _snapshot(self, index: int, when: str) -> None:
        if index in self.rounds:
            sent = self.statements() if self.statements else 0
            self.flush()
            self.snapshots[index, when] = (sent, self.observer.read())

    def before(self, index: int) -> None:
        self._snapshot(index, "before")

    def after(self, index: int) -> None:
        self._snapshot(index, "after")

    def round(self, index: int) -> Counts:
        """What round `index` cost, the closing flush (one statement, one commit) taken off."""
        delta = self.snapshots[index, "after"][1] - self.snapshots[index, "before"][1]
        return Counts(delta.commits - 1, delta.rows, delta.wal_writes, delta.wal_syncs)

    def round_statements(self, index: int) -> int:
        sent = self.snapshots[index, "after"][0] - self.snapshots[index, "before"][0]
        return sent - 1  # the opening flush

    def median(self, window: Iterable[int]) -> Counts:
        return median_counts(self.round(i) for i in window)

    def settle(self) -> None:
        """At the end of the contender's block: publish what its uncounted rounds left pending,
        so that it does not land in another contender's counted round later."""
        self.flush()


def add_counts(report, name: str, counts: Counts, *, statements: Iterable[int]) -> None:
    """One printed line (commits, the rest beside them) and a JSON figure per counter.

    `statements` are the window's rounds' counts: all the distinct ones are printed (a round
    that differs shows), their median goes to the JSON."""
    statements = list(statements)
    seen = "/".join(map(str, sorted(set(statements))))
    report.add(
        name,
        counts.commits,
        "commits",
        extra=f"{seen} statements, {counts.rows:g} rows written, "
        f"{counts.wal_writes:g} WAL writes, {counts.wal_syncs:g} WAL syncs",
    )
    report.record(f"{name}: statements", statistics.median(statements), "statements")
    report.record(f"{name}: rows written", counts.rows, "rows")
    report.record(f"{name}: WAL writes", counts.wal_writes, "writes")
    report.record(f"{name}: WAL syncs", counts.wal_syncs, "syncs")


def conninfo() -> str:
    """libpq parameters of Django's default database (PostgreSQL)."""
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    db = settings.DATABASES["default"]
    return make_conninfo(
        dbname=db["NAME"],
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=str(db["PORT"]) if db.get("PORT") else None,
    )


def observer() -> Observer | None:
    """The observer of the configured database, or None: not PostgreSQL, or BENCH_PG_COUNTS=off."""
    from django.conf import settings
    from django.db import connection

    if not ENABLED or connection.vendor != "postgresql":
        return None
    return Observer(conninfo(), str(settings.DATABASES["default"]["NAME"]))


def flush_django() -> None:
    """Publish the statistics of Django's connection (the Guardian contender's)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(FLUSH)


def django_setting(name: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return cursor.fetchone()[0]
