"""Run Guardian's own commands in child processes, with a chosen environment."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child_env(**overrides: str | None) -> dict[str, str]:
    """This process's environment with `overrides` applied; a None value unsets the variable."""
    env = dict(os.environ)
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_manage(*args: str, timeout: float = 60, **env: str | None) -> subprocess.CompletedProcess:
    """`python manage.py ARGS` in the repository, output captured as text."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
