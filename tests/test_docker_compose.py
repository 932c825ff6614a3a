"""docker-compose.yml and the Dockerfile describe a deployment the settings can actually run."""

import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from django.conf import settings

from guardian_core.env import broker_from_url, database_from_url

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
APP_SERVICES = ("web", "wait", "worker", "beat")
APP_ROLE_SCRIPT = REPO_ROOT / "deploy" / "postgres" / "10-guardian-app-role.sh"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def _interpolate(value: str) -> str:
    """The value as Compose sees it with no variable set: defaults filled in."""

    def replace(match: re.Match) -> str:
        op = match["op"] or ""
        if op.endswith("?"):
            raise AssertionError(f"{match['name']} is required: {match['arg']}")
        return match["arg"] if op.endswith("-") else ""

    return _VARIABLE.sub(replace, value)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {name: str(value) for name, value in env.items()}


def _command_words(service: dict) -> list[str]:
    command = service["command"]
    words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    # `sh -c "a && b"`: the words of the script itself.
    if words[:2] in (["sh", "-c"], ["/bin/sh", "-c"], ["bash", "-c"]):
        words = shlex.split(" ".join(words[2:]))
    return words


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    lines = [
        line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")
    ]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    instructions = []
    for line in text.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


SPLIT_WORKERS = {f"worker-{queue}": queue for queue in settings.GUARDIAN_CELERY_QUEUES}


def test_compose_defines_the_seven_services(services):
    started = {name for name, service in services.items() if not service.get("profiles")}
    assert started == {"postgres", "redis", "migrate", "web", "wait", "worker", "beat"}


def _queues_option(words: list[str]) -> list[str] | None:
    for flag in ("--queues", "-Q"):
        if flag in words:
            return words[words.index(flag) + 1].split(",")
    return None


def test_the_worker_scales_and_consumes_every_queue(services):
    """`docker compose up --scale worker=N`: copies of one service cannot share a container
    name or a host port; with no --queues each consumes every queue in the settings."""
    worker = services["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert _queues_option(_command_words(worker)) is None


def test_a_worker_per_queue_is_offered_behind_a_profile(services):
    """Off by default (a profile), one service per queue of GUARDIAN_CELERY_QUEUES, each
    scalable and built like the all-queues worker."""
    split = {name for name in services if name.startswith("worker-")}
    assert split == set(SPLIT_WORKERS)
    for name, queue in SPLIT_WORKERS.items():
        service = services[name]
        assert service["profiles"] == ["split-queues"], name
        assert "container_name" not in service, name
        assert "ports" not in service, name
        words = _command_words(service)
        assert words[: words.index("worker") + 1] == _command_words(services["worker"])[:4]
        assert _queues_option(words) == [queue], name
        assert service["environment"] == services["worker"]["environment"], name
        assert service.get("tmpfs") == services["worker"].get("tmpfs"), name
        assert service["depends_on"] == services["worker"]["depends_on"], name


def test_postgres_runs_postgres_16_and_is_checked_with_pg_isready(services):
    postgres = services["postgres"]
    assert postgres["image"].split(":")[0] == "postgres"
    assert postgres["image"].split(":")[1].startswith("16")
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_redis_runs_redis_7_and_is_checked_with_redis_cli_ping(services):
    redis = services["redis"]
    assert redis["image"].split(":")[0] == "redis"
    assert redis["image"].split(":")[1].startswith("7")
    test = redis["healthcheck"]["test"]
    assert test[-2:] == ["redis-cli", "ping"] or "redis-cli ping" in " ".join(test)


def test_postgres_keeps_its_data_in_the_declared_named_volume(compose, services):
    assert "postgres-data" in compose["volumes"]
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]


def test_app_services_share_one_database_url_pointing_at_the_postgres_service(services):
    urls = {_environment(services[name])["DATABASE_URL"] for name in APP_SERVICES}
    assert len(urls) == 1
    url = _interpolate(urls.pop())
    assert urlsplit(url).scheme in {"postgres", "postgresql"}
    assert urlsplit(url).hostname == "postgres"
    config = database_from_url(url, sqlite_test_name=Path("unused.sqlite3"))
    assert config["ENGINE"] == "django.db.backends.postgresql"


def test_migrate_runs_as_the_owner_postgres_is_created_with(services):
    postgres_env = _environment(services["postgres"])
    url = urlsplit(_interpolate(_environment(services["migrate"])["DATABASE_URL"]))
    assert url.hostname == "postgres"
    assert url.path.lstrip("/") == postgres_env["POSTGRES_DB"]
    assert url.username == postgres_env["POSTGRES_USER"]
    assert url.password == _interpolate(postgres_env["POSTGRES_PASSWORD"])
    assert url.port == 5432


def test_the_app_runs_as_a_role_that_does_not_own_the_tables(services):
    """Issue 22: the app's role owned the tables, so it could switch the log's triggers off.
    web, worker and beat log in as the role migrate grants (GUARDIAN_DB_APP_ROLE), never as
    the owner, and none of them holds the owner's password."""
    postgres_env = _environment(services["postgres"])
    migrate_env = _environment(services["migrate"])
    owner_password = _interpolate(postgres_env["POSTGRES_PASSWORD"])
    app_role = migrate_env["GUARDIAN_DB_APP_ROLE"]
    assert app_role
    assert app_role != postgres_env["POSTGRES_USER"]
    for name in APP_SERVICES:
        env = _environment(services[name])
        url = urlsplit(_interpolate(env["DATABASE_URL"]))
        assert url.username == app_role, name
        assert url.path.lstrip("/") == postgres_env["POSTGRES_DB"], name
        assert url.password != owner_password, name
        assert "POSTGRES_PASSWORD" not in " ".join(env.values()), name
        assert "migrate" not in _command_words(services[name]), name


def test_postgres_makes_the_app_role_with_its_password_on_first_start(services):
    postgres = services["postgres"]
    mount = f"./{APP_ROLE_SCRIPT.relative_to(REPO_ROOT)}:/docker-entrypoint-initdb.d/"
    assert any(volume.startswith(mount) for volume in postgres["volumes"])
    script = APP_ROLE_SCRIPT.read_text()
    app_role = _environment(services["migrate"])["GUARDIAN_DB_APP_ROLE"]
    assert f"CREATE ROLE {app_role} LOGIN" in script
    assert "NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS" in script
    app_url = urlsplit(_interpolate(_environment(services["web"])["DATABASE_URL"]))
    # The script sets the password the app's URL carries (both from one variable).
    assert _interpolate(_environment(postgres)["GUARDIAN_APP_DB_PASSWORD"]) == app_url.password


def test_app_services_share_one_broker_url_pointing_at_the_redis_service(services):
    urls = {_environment(services[name])["CELERY_BROKER_URL"] for name in APP_SERVICES}
    assert len(urls) == 1
    url = _interpolate(urls.pop())
    assert urlsplit(url).scheme == "redis"
    assert urlsplit(url).hostname == "redis"
    broker, _, result_backend = broker_from_url(url, var_dir=Path("unused"))
    assert broker == url
    assert result_backend == url


def test_app_services_run_with_debug_off(services):
    for name in APP_SERVICES:
        assert _interpolate(_environment(services[name])["DEBUG"]).lower() == "false"


def test_secret_key_is_required_rather_than_defaulted(services):
    for name in APP_SERVICES:
        secret_key = _environment(services[name])["SECRET_KEY"]
        assert re.fullmatch(r"\$\{SECRET_KEY\?.*\}|\$\{SECRET_KEY:\?.*\}", secret_key)


def test_every_app_service_and_migrate_seal_under_the_same_log_key_from_env(services):
    """The log key reaches every process that seals or re-seals (the migration re-seals), from
    .env, never written into the file; an empty one falls back to one derived from SECRET_KEY."""
    for name in (*APP_SERVICES, "migrate"):
        env = _environment(services[name])
        assert env["GUARDIAN_LOG_KEY"] == "${GUARDIAN_LOG_KEY:-}", name
        assert env["GUARDIAN_LOG_OLD_KEYS"] == "${GUARDIAN_LOG_OLD_KEYS:-}", name


def test_migrate_migrates_once_and_web_serves_the_wsgi_app_with_gunicorn(services):
    assert _command_words(services["migrate"])[-3:] == ["manage.py", "migrate", "--no-input"]
    assert services["migrate"]["restart"] == "no"
    words = _command_words(services["web"])
    assert words[0] == "gunicorn"
    assert "guardian_core.wsgi:application" in words


def test_web_serves_in_threads_so_waiting_agent_loops_leave_room_for_the_pages(services):
    # An external run's long poll holds its request up to 30 s: with sync workers, three
    # waiting loops would take every worker from the reviewers.
    words = _command_words(services["web"])
    served = words[words.index("gunicorn") :]
    assert served[served.index("--worker-class") + 1] == "gthread"
    assert int(served[served.index("--threads") + 1]) >= 4


def test_web_publishes_port_8000_and_checks_healthz(services):
    web = services["web"]
    assert "8000:8000" in [str(port) for port in web["ports"]]
    assert "/healthz" in " ".join(web["healthcheck"]["test"])


def test_callers_wait_for_verdicts_on_the_wait_server_that_compose_publishes(services):
    # Held long polls go to the async wait server, not to gunicorn's threads: the step
    # answers' wait_url names it, on the port it publishes.
    wait = services["wait"]
    words = _command_words(wait)
    assert words[words.index("manage.py") + 1 :][:1] == ["wait_server"]
    port = words[words.index("--port") + 1]
    assert f"{port}:{port}" in [str(published) for published in wait["ports"]]
    assert "/healthz" in " ".join(wait["healthcheck"]["test"])
    url = urlsplit(_interpolate(_environment(services["web"])["GUARDIAN_WAIT_URL"]))
    assert (url.scheme, url.port) == ("http", int(port))
    assert _environment(wait)["CELERY_BROKER_URL"].startswith("redis://")  # its announcements


@pytest.mark.parametrize("name", ["worker", "beat"])
def test_worker_and_beat_run_celery_on_the_guardian_app(services, name):
    words = _command_words(services[name])
    assert words[0] == "celery"
    app = words.index("--app")
    assert words[app + 1] == "guardian_core.celery"
    assert words[app + 2] == name


@pytest.mark.parametrize("name", APP_SERVICES)
def test_each_app_service_waits_for_healthy_postgres_and_redis(services, name):
    depends_on = services[name]["depends_on"]
    assert depends_on["postgres"]["condition"] == "service_healthy"
    assert depends_on["redis"]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_each_app_service_waits_for_the_migrations(services, name):
    condition = services[name]["depends_on"]["migrate"]["condition"]
    assert condition == "service_completed_successfully"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_each_app_service_is_built_from_the_dockerfile_and_restarts(services, name):
    assert services[name]["build"] in (".", {"context": "."})
    assert services[name]["restart"] == "unless-stopped"


def test_dockerfile_builds_on_python_3_12_slim_and_installs_the_project():
    instructions = _dockerfile_instructions()
    assert ("FROM", "python:3.12-slim") in instructions
    runs = [arguments for keyword, arguments in instructions if keyword == "RUN"]
    assert any(re.search(r"\bpip install \.(\s|$)", run) for run in runs)


def test_dockerfile_collects_static_files_and_runs_as_a_non_root_user():
    instructions = _dockerfile_instructions()
    runs = [arguments for keyword, arguments in instructions if keyword == "RUN"]
    assert any("collectstatic --no-input" in run for run in runs)
    users = [arguments for keyword, arguments in instructions if keyword == "USER"]
    assert users
    assert users[-1] not in {"root", "0"}
    assert ("EXPOSE", "8000") in instructions


def test_the_mcp_gateway_serves_http_behind_a_profile_with_its_config_mounted_read_only(services):
    """Issue 27: off by default (profile mcp), the app's image, database role and broker, the
    gateway over Streamable HTTP on 8765, its TOML from deploy/ read-only: a file it loads."""
    from mcp_gateway.config import load_config

    gateway = services["mcp-gateway"]
    assert gateway["profiles"] == ["mcp"]
    assert gateway["build"] in (".", {"context": "."})
    assert gateway["restart"] == "unless-stopped"
    env = _environment(gateway)
    web = _environment(services["web"])
    assert env["DATABASE_URL"] == web["DATABASE_URL"]
    assert env["CELERY_BROKER_URL"] == web["CELERY_BROKER_URL"]
    assert env["SECRET_KEY"] == web["SECRET_KEY"]
    words = _command_words(gateway)
    assert words[:3] == ["python", "manage.py", "mcp_gateway"]
    assert words[words.index("--transport") + 1] == "http"
    assert words[words.index("--host") + 1] == "0.0.0.0"
    port = words[words.index("--port") + 1]
    assert f"{port}:{port}" in [str(p) for p in gateway["ports"]]
    mounted = words[words.index("--config") + 1]
    (volume,) = [v for v in gateway["volumes"] if v.split(":")[1] == mounted]
    source, _, mode = volume.split(":")
    assert mode == "ro"
    config = load_config(REPO_ROOT / source)
    assert config.token_env in env
    assert gateway["depends_on"] == services["web"]["depends_on"]


def test_the_image_holds_every_installed_app_of_the_project():
    """An app in INSTALLED_APPS that the image lacks stops every process of it at start."""
    copied = {
        arguments.split()[0].rstrip("/")
        for keyword, arguments in _dockerfile_instructions()
        if keyword == "COPY"
    }
    ours = {app for app in settings.INSTALLED_APPS if (REPO_ROOT / app).is_dir()}
    assert ours <= copied, ours - copied
