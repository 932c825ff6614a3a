"""The tooling behind the README's commands: the Python finder and the Makefile targets."""

import os
import subprocess
import sys

from tests.processes import REPO, run_manage

FIND_PYTHON = str(REPO / "scripts" / "find-python")


def _find_python(path_dir, home):
    return subprocess.run(
        [FIND_PYTHON],
        env={"PATH": str(path_dir), "HOME": str(home), "PYENV_ROOT": str(home / "no-pyenv")},
        capture_output=True,
        text=True,
        check=False,
    )


def _is_older_python(path: str) -> bool:
    try:
        check = "import sys; print(sys.version_info < (3, 12))"
        out = subprocess.run([path, "-c", check], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return out.stdout.strip() == "True"


def test_find_python_reports_a_3_12_or_newer_interpreter(tmp_path):
    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "bin" / "python3.12")
    os.symlink("/bin/sh", tmp_path / "bin" / "sh")
    result = _find_python(tmp_path / "bin", tmp_path)
    assert result.returncode == 0, result.stderr
    found = result.stdout.strip()
    version = subprocess.run(
        [found, "-c", "import sys; print(sys.version_info >= (3, 12))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == "True"


def test_find_python_stops_with_a_clear_message_when_only_an_older_python_exists(tmp_path):
    (tmp_path / "bin").mkdir()
    old = tmp_path / "bin" / "python3"
    if _is_older_python("/usr/bin/python3"):
        os.symlink("/usr/bin/python3", old)  # Debian 12's own Python 3.11
    else:
        # A stand-in for Python 3.11: it fails the version check the way a real one would.
        old.write_text("#!/bin/sh\nexit 1\n")
        old.chmod(0o755)
    result = _find_python(tmp_path / "bin", tmp_path)
    assert result.returncode == 1
    assert "needs Python 3.12 or newer" in result.stderr
    assert result.stdout == ""


def test_the_makefile_has_the_readme_commands():
    targets = subprocess.run(
        ["make", "-pRrq", "-f", "Makefile", ":"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for target in ("demo:", "test:", "lint:", "bench:"):
        assert f"\n{target}" in targets, target


def test_the_models_and_migrations_agree():
    result = run_manage("makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_template_comment_closes_on_its_own_line():
    # Django's {# … #} is one line only: an unclosed one renders as text on the page, so a
    # longer comment needs {% comment %}.
    from pathlib import Path

    templates = Path(__file__).resolve().parent.parent / "templates"
    unclosed = [
        f"{path}:{number}"
        for path in sorted(templates.rglob("*.html"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if line.count("{#") > line.count("#}")
    ]
    assert unclosed == []
