"""`make demo` stops cleanly on Ctrl-C: the web server, worker and beat go down without worker
errors, a SIGKILL or make's "Error 130" (a real make demo in a process group of its own, on
the embedded default, sent SIGINT as a terminal sends it)."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.processes import REPO, child_env

pytestmark = pytest.mark.worker

VENV = Path(sys.prefix)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own server
            return response.status == 200
    except OSError:
        return False


def test_ctrl_c_stops_make_demo_cleanly(tmp_path):
    port = int(os.environ.get("GUARDIAN_TEST_DEMO_PORT") or _free_port())
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 - closed below
    demo = subprocess.Popen(
        [
            "make",
            "demo",
            f"PORT={port}",
            # This interpreter's virtualenv, as make's own (relative: the recipe puts
            # $(CURDIR)/$(VENV)/bin on PATH), never reinstalled from here.
            f"VENV={os.path.relpath(VENV, REPO)}",
            "-o",
            f"{os.path.relpath(VENV, REPO)}/.installed-base",
        ],
        cwd=REPO,
        env=child_env(
            GUARDIAN_VAR_DIR=str(tmp_path),
            DATABASE_URL=None,
            CELERY_BROKER_URL=None,
            CELERY_RESULT_BACKEND=None,
            PORT=None,
            GUARDIAN_DEMO_TRAFFIC_SECONDS="5",  # a run under way when Ctrl-C comes
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # make leads its own process group, as in a terminal
    )
    try:
        deadline = time.monotonic() + 300
        while not _answers(f"http://127.0.0.1:{port}/accounts/login/"):
            assert demo.poll() is None, "make demo exited before the login page answered"
            assert time.monotonic() < deadline, "the login page did not answer within 300 s"
            time.sleep(2)
        # The worker and beat up too, and a demo run's task handled.
        while True:
            log.seek(0)
            output = log.read()
            if "beat: Starting" in output and "Task runs.advance_run" in output:
                break
            assert time.monotonic() < deadline, output[-3000:]
            time.sleep(1)

        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        demo.wait(timeout=60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        log.seek(0)
        output = log.read()
        log.close()

    stop = output[output.index("SIGINT received") :] if "SIGINT received" in output else output
    for bad in ("Traceback", "SIGKILL", "Error 130", "ERROR/", "exited with 'signal"):
        assert bad not in stop, f"{bad!r} in what make demo printed on Ctrl-C:\n{stop}"
    assert "Guardian stopped (Ctrl-C)" in stop, stop
    # The recipe ended cleanly; make itself then dies of the SIGINT it was sent, as any
    # program the user interrupts does (GNU make re-raises it once its recipe is done).
    assert demo.returncode == -signal.SIGINT, (demo.returncode, stop)
    assert not _answers(f"http://127.0.0.1:{port}/accounts/login/")
