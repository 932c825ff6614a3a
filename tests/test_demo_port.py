"""`make demo` checks its web port before it changes anything (migrate, the demo passwords)."""

import socket
import subprocess

import pytest

from tests.processes import REPO, child_env, run_manage


@pytest.fixture
def busy_port():
    """A port some other server is listening on, on the address the demo binds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_preflight_refuses_a_busy_port_naming_it_and_how_to_choose_another(busy_port):
    result = run_manage("preflight", "--port", str(busy_port))

    assert result.returncode == 2
    problem = [line for line in result.stderr.splitlines() if f"port {busy_port}" in line]
    assert len(problem) == 1, result.stderr
    assert problem[0].startswith(f"guardian: port {busy_port} on 127.0.0.1 is already in use")
    assert "make demo PORT=" in problem[0]
    suggested = int(problem[0].rsplit("PORT=", 1)[1])
    assert suggested != busy_port


def test_preflight_passes_a_free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_manage("preflight", "--port", str(port))
    assert result.returncode == 0, result.stderr
    assert f"port: ok (127.0.0.1:{port} is free)" in result.stdout


def test_preflight_refuses_a_number_that_is_no_port():
    result = run_manage("preflight", "--port", "70000")
    assert result.returncode == 2
    assert "guardian: --port 70000 is not a TCP port (1-65535)" in result.stderr


def demo_commands(*make_args: str, cwd=REPO) -> list[str]:
    """The commands `make demo` would run, in order (make -n: nothing runs)."""
    result = subprocess.run(
        ["make", "-n", "-f", str(REPO / "Makefile"), "demo", *make_args],
        cwd=cwd,
        # PORT from the environment would win over .env, as it should; these tests set their own.
        env=child_env(PORT=None),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_make_demo_checks_the_port_before_it_migrates_or_resets_the_passwords():
    commands = demo_commands("PORT=8123")
    order = [
        next(i for i, line in enumerate(commands) if step in line)
        for step in ("manage.py preflight --port 8123", "manage.py migrate", "manage.py demo_setup")
    ]
    assert order == sorted(order), commands
    assert any("honcho" in line and "--port 8123" in line for line in commands)


def test_make_demo_takes_its_port_from_dot_env_unless_given(tmp_path):
    # A project folder of its own, so the checkout's .env (if any) plays no part.
    (tmp_path / "pyproject.toml").touch()
    (tmp_path / ".env").write_text("# mine\nexport PORT='8765'  # the demo's\n")

    assert any("preflight --port 8765" in line for line in demo_commands(cwd=tmp_path))
    assert any("preflight --port 8001" in line for line in demo_commands("PORT=8001", cwd=tmp_path))
