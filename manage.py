#!/usr/bin/env python
"""Django's command-line utility, with configuration and connection errors as one clear line."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from django.db.utils import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        sys.exit(f"guardian: configuration error: {exc}")
    except OperationalError as exc:
        from django.conf import settings

        from guardian_core.env import redact_url

        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.exit(
            f"guardian: cannot use the database at DATABASE_URL={redact_url(settings.DATABASE_URL)}"
            f" ({reason})"
        )


if __name__ == "__main__":
    main()
