"""The engine and the adapters stay free of Django, DRF, Celery and Redis.

`make lint` checks the static imports with import-linter (pyproject.toml); the probe here checks
what importing them really loads, in a fresh interpreter, so a transitive import counts too.
"""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.processes import REPO

FORBIDDEN = (
    "django",
    "rest_framework",
    "drf_spectacular",
    "django_htmx",
    "celery",
    "kombu",
    "redis",
)

PROBE = f"""
import importlib, pkgutil, sys
import guardian_core.engine, guardian_core.adapters
for package in (guardian_core.engine, guardian_core.adapters):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & set({FORBIDDEN!r}))
print(",".join(loaded))
"""


def frameworks_loaded_by_the_engine(root: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_importing_the_engine_and_adapters_loads_no_framework():
    assert frameworks_loaded_by_the_engine(REPO) == ""


def test_the_probe_notices_an_engine_module_that_imports_django(tmp_path):
    # The contract's own check: the same probe on a copy with one offending module.
    copy = tmp_path / "guardian_core"
    shutil.copytree(REPO / "guardian_core", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "engine" / "offender.py").write_text("from django.conf import settings\n")
    assert frameworks_loaded_by_the_engine(tmp_path) == "django"


def test_the_static_import_contract_holds():
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter)], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
