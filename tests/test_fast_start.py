"""A process starts without numpy, scipy or scikit-learn (issue 23): `manage.py check` (which
loads every app, the URL map and so every view and API module) and a worker's start (every
app's tasks module) import none of them; the functions that measure or fit import them (their
own tests call those functions, so an import lost on the way fails there)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "scipy", "sklearn")

# What `manage.py check` does, then what a worker does at start (the Celery app's task modules),
# then which heavy libraries are in the interpreter.
START = """
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("check", verbosity=0)
from guardian_core.celery import app
app.loader.import_default_modules()
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print(json.dumps(heavy))
"""


def _heavy_after_start(tmp_path: Path) -> list[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "guardian_core.settings"}
    env.setdefault("GUARDIAN_VAR_DIR", str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", START, *HEAVY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_web_or_worker_process_starts_without_numpy_scipy_or_scikit_learn(tmp_path):
    assert _heavy_after_start(tmp_path) == []
