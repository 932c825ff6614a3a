"""The soak's own production-shaped stack on this machine: a throwaway PostgreSQL cluster and
Redis (started as .ci/services.sh starts CI's, on ports of their own, so that restarting them
as faults touches nobody else's servers), gunicorn, two Celery workers and beat.

Nothing here imports Django: the stack is up before the soak's own process sets its database
and broker from it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# The roles as in .ci/services.sh: the suite's login role, and the app's own NOLOGIN role that
# the decision log's protections are written for (runs/db_roles.py).
APP_USER = APP_PASS = "app"
DB_NAME = "soak"
# The worker pools (one process a worker, threads inside): as Procfile.demo runs them.
WORKER_CONCURRENCY = 2
# Where the two workers' queues go once settings route tasks to queues of their own (issue 26,
# item 7: GUARDIAN_CELERY_QUEUES). Each entry is one worker's `-Q` argument; None starts the
# worker with no -Q, so that it consumes every queue (the default queue until the routing
# lands). SOAK-QUEUES: when the routing is in settings, see worker_queues().
DEFAULT_WORKER_QUEUES: tuple[str | None, str | None] = (None, None)


def pg_bin() -> Path | None:
    """The newest Debian PostgreSQL's bin directory (/usr/lib/postgresql/N/bin), as CI finds it."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name or 0))
    return found[-1] if found else None


def missing_servers() -> list[str]:
    """What this machine lacks to run the soak's servers (empty: nothing)."""
    missing = []
    if pg_bin() is None or not (pg_bin() / "initdb").exists():
        missing.append("PostgreSQL's server binaries (/usr/lib/postgresql/N/bin)")
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        missing.append("redis-server and redis-cli")
    if not (BIN / "gunicorn").exists() or not (BIN / "celery").exists():
        missing.append(f"gunicorn and celery in {BIN}")
    return missing


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:`port` (a bind test would fail on a closed connection's
    TIME_WAIT left by the soak before)."""
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def worker_queues() -> tuple[str | None, str | None]:
    """Each worker's -Q: from GUARDIAN_CELERY_QUEUES once settings have it (the first worker
    runs turns, the second everything else), else no -Q for both (every queue)."""
    # SOAK-QUEUES: the routing (item 7) is another part of issue 26; when settings define
    # GUARDIAN_CELERY_QUEUES, split the workers along it here.
    from django.conf import settings  # set up by then: the soak's own process

    queues = list(getattr(settings, "GUARDIAN_CELERY_QUEUES", []) or [])
    if "turns" in queues and len(queues) > 1:
        return "turns", ",".join(q for q in queues if q != "turns")
    return DEFAULT_WORKER_QUEUES


@dataclass
class Proc:
    """One process of the stack, restartable: its command, its log, its Popen."""

    name: str
    command: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    starts: int = 0


@dataclass
class Stack:
    """The servers and processes of one soak, all under `workdir`."""

    workdir: Path
    pg_port: int
    redis_port: int
    web_port: int
    db_name: str = DB_NAME
    # As the soak has always run it; the load test reports it beside its peak of connections.
    pg_max_connections: int = 200
    # gunicorn as docker-compose.yml serves it: gthread workers, threads inside each.
    web_workers: int = 2
    web_threads: int = 8
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    # Processes down on purpose (a fault's SIGKILL until its restart), and the others that
    # exited by themselves: {name, code, log's last line}, each restarted as compose's
    # `restart: unless-stopped` would.
    expected_down: set[str] = field(default_factory=set)
    unexpected_exits: list[dict] = field(default_factory=list)

    # ---- paths and URLs ----------------------------------------------------------------------

    @property
    def pgdata(self) -> Path:
        return self.workdir / "pgdata"

    @property
    def pgrun(self) -> Path:
        return self.workdir / "pgrun"

    @property
    def redis_dir(self) -> Path:
        return self.workdir / "redis"

    @property
    def database_url(self) -> str:
        return f"postgres://{APP_USER}:{APP_PASS}@127.0.0.1:{self.pg_port}/{self.db_name}"

    @property
    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    # ---- PostgreSQL ------------------------------------------------------------------------

    def _as_pg(self, command: list[str], **kwargs) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:  # initdb and pg_ctl refuse root: run them as postgres
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, **kwargs)

    def postgres_init(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)  # postgres must traverse it
        for directory, mode in ((self.pgdata, 0o700), (self.pgrun, 0o755)):
            directory.mkdir(exist_ok=True)
            directory.chmod(mode)
            if os.geteuid() == 0:
                shutil.chown(directory, "postgres", "postgres")
        done = self._as_pg(
            [str(pg_bin() / "initdb"), "-D", str(self.pgdata), "-U", "postgres", "-A", "trust"]
            + ["-E", "UTF8", "--locale=C.UTF-8"]
        )
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")

    def postgres_start(self) -> None:
        # No fsync (a throwaway cluster: an immediate stop kills processes, not the machine, so
        # what was written to the OS survives), but synchronous_commit stays on, as in
        # production: with it off (as CI's servers run) an immediate stop loses commits already
        # acknowledged, and the soak sees a client holding an escalation that no longer exists.
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.pg_port} -k {self.pgrun} "
            "-c fsync=off -c full_page_writes=off "
            f"-c max_connections={self.pg_max_connections}"
        )
        for attempt in range(5):
            done = self._as_pg(
                [str(pg_bin() / "pg_ctl"), "-D", str(self.pgdata)]
                + ["-l", str(self.pgrun / "postgres.log"), "-w", "-t", "60", "start"]
                + ["-o", options]
            )
            if done.returncode == 0:
                return
            # A postmaster killed a moment ago can linger; its pid file then still names it.
            time.sleep(1 + attempt)
        log = (self.pgrun / "postgres.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"PostgreSQL did not start: {done.stderr} {log}")

    def postgres_stop(self, mode: str = "fast") -> None:
        self._as_pg([str(pg_bin() / "pg_ctl"), "-D", str(self.pgdata), "-m", mode, "-w", "stop"])

    def postgres_restart_immediate(self) -> None:
        """The fault: every backend dies at once, no checkpoint (crash recovery on start)."""
        self.postgres_stop("immediate")
        self.postgres_start()

    def postgres_setup(self) -> None:
        psql = ["psql", "-X", "-w", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"]
        psql += ["-p", str(self.pg_port), "-U", "postgres", "-d", "postgres", "-c"]
        for sql in (
            f"CREATE ROLE {APP_USER} LOGIN CREATEDB PASSWORD '{APP_PASS}'",
            "CREATE ROLE guardian_app NOLOGIN",
            f"GRANT guardian_app TO {APP_USER}",
            f"CREATE DATABASE {self.db_name} OWNER {APP_USER}",
        ):
            done = subprocess.run([*psql, sql], capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{sql}: {done.stderr}")

    def servers_start(self) -> None:
        """A fresh PostgreSQL cluster with the app's roles and database, and Redis."""
        self.postgres_init()
        self.postgres_start()
        self.postgres_setup()
        self.redis_start()

    # ---- Redis -----------------------------------------------------------------------------

    def redis_start(self) -> None:
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port)]
            + ["--daemonize", "yes", "--pidfile", str(self.redis_dir / "redis.pid")]
            + ["--logfile", str(self.redis_dir / "redis.log"), "--dir", str(self.redis_dir)]
            + ["--save", "", "--appendonly", "no"],
            check=True,
            capture_output=True,
        )
        for _ in range(100):
            if self.redis_ping():
                return
            time.sleep(0.1)
        raise RuntimeError(f"Redis did not answer on port {self.redis_port}")

    def redis_ping(self) -> bool:
        done = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.redis_port), "ping"],
            capture_output=True,
            text=True,
        )
        return "PONG" in done.stdout

    def redis_stop(self) -> None:
        subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.redis_port), "shutdown", "nosave"],
            capture_output=True,
        )
        for _ in range(50):
            if not self.redis_ping():
                return
            time.sleep(0.1)

    def redis_restart(self) -> None:
        """The fault: Redis goes down with every queued message (nothing saved), then back."""
        self.redis_stop()
        time.sleep(1.0)
        self.redis_start()

    # ---- the app's processes ---------------------------------------------------------------

    def app_env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **self.env, **extra}

    def add(self, name: str, command: list[str]) -> Proc:
        proc = Proc(name, command, self.workdir / "logs" / f"{name}.log")
        self.procs[name] = proc
        return proc

    def start(self, name: str) -> Proc:
        proc = self.procs[name]
        proc.log.parent.mkdir(parents=True, exist_ok=True)
        with proc.log.open("a") as log:
            log.write(f"\n==== start {proc.starts + 1} at {time.strftime('%H:%M:%S')}\n")
            log.flush()
            proc.popen = subprocess.Popen(
                proc.command,
                cwd=REPO,
                env=self.app_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: a SIGKILL hits it alone
            )
        proc.starts += 1
        self.expected_down.discard(name)
        return proc

    def supervise(self) -> None:
        """Restart any process that exited by itself (and record it)."""
        for name, proc in list(self.procs.items()):
            if name in self.expected_down or proc.popen is None:
                continue
            code = proc.popen.poll()
            if code is None:
                continue
            lines = proc.log.read_text(errors="replace").strip().splitlines()
            self.unexpected_exits.append(
                {"name": name, "code": code, "last_line": lines[-1][-300:] if lines else ""}
            )
            self.start(name)

    def kill(self, name: str) -> int:
        """SIGKILL one process (a worker dying mid-task); returns the pid it had."""
        proc = self.procs[name]
        assert proc.popen is not None
        self.expected_down.add(name)
        pid = proc.popen.pid
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(timeout=30)
        return pid

    def define_processes(self, queues: tuple[str | None, str | None]) -> None:
        celery = [str(BIN / "celery"), "--app", "guardian_core.celery"]
        self.add(
            "web",
            [str(BIN / "gunicorn"), "guardian_core.wsgi:application"]
            + ["--bind", f"127.0.0.1:{self.web_port}", "--workers", str(self.web_workers)]
            # As docker-compose.yml serves it: threads; long polls on verdicts hold one each.
            + ["--worker-class", "gthread", "--threads", str(self.web_threads)]
            + ["--timeout", "60"]
            + ["--access-logfile", "-"],
        )
        for number, queue in enumerate(queues, start=1):
            command = [*celery, "worker", "--loglevel", "INFO", "--pool", "threads"]
            command += ["--concurrency", str(WORKER_CONCURRENCY), "--hostname", f"soak{number}@%h"]
            if queue:
                command += ["-Q", queue]
            self.add(f"worker{number}", command)
        self.add(
            "beat",
            [*celery, "beat", "--loglevel", "INFO"]
            + ["--schedule", str(self.workdir / "celerybeat-schedule")],
        )

    def stop_processes(self) -> None:
        for proc in self.procs.values():
            if proc.popen is not None and proc.popen.poll() is None:
                proc.popen.terminate()
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            if proc.popen is None:
                continue
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=10)

    def teardown(self, *, keep: bool) -> None:
        self.stop_processes()
        self.redis_stop()
        if self.pgdata.exists():
            self.postgres_stop("fast")
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def app_environment(stack: Stack) -> dict[str, str]:
    """The settings every process of the soak runs with (the production shape, short leases)."""
    return {
        "DJANGO_SETTINGS_MODULE": "guardian_core.settings",
        "DATABASE_URL": stack.database_url,
        "CELERY_BROKER_URL": stack.broker_url,
        "CELERY_RESULT_BACKEND": "",  # the broker's, not one the caller's environment names
        "GUARDIAN_VAR_DIR": str(stack.workdir / "var"),
        "GUARDIAN_ENV_FILE": "",  # no developer's .env
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        # The demo scenarios' actors are scripted adapters (allowed, as in the demo).
        "GUARDIAN_ALLOW_SCRIPTED_ADAPTERS": "true",
        # A killed worker's run is swept after 10 s, not 5 min: the soak is bounded.
        "GUARDIAN_TURN_LEASE_SECONDS": "10",
        "GUARDIAN_STALLED_AFTER_SECONDS": "5",
        # /metrics on, for the soak's scrape (issue 26 item 1), behind a token of its own.
        "GUARDIAN_METRICS_ENABLED": "true",
        "GUARDIAN_METRICS_TOKEN": secrets.token_urlsafe(24),
        # No random audit draws: every escalation is one the runs raised.
        "GUARDIAN_AUDIT_SAMPLE_SHARE": "0",
    }


def wait_for_web(stack: Stack, timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        web = stack.procs["web"].popen
        if web is not None and web.poll() is not None:
            log = stack.procs["web"].log
            raise RuntimeError(f"gunicorn exited with {web.returncode}; see {log}")
        try:
            if httpx.get(f"{stack.web_url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"gunicorn did not answer on {stack.web_url}")
