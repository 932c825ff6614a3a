"""`manage.py preflight`: check that DATABASE_URL and CELERY_BROKER_URL answer, one line each."""

import sys

from django.core.management.base import BaseCommand

from guardian_core.env import redact_url
from guardian_core.health import (
    broker_status,
    database_status,
    describe_broker_failure,
    describe_database_failure,
)


class Command(BaseCommand):
    help = "Check that the database and the broker are reachable; exit 2 if either is not."

    requires_system_checks: list = []

    def handle(self, *args, **options) -> None:
        from django.conf import settings

        database = database_status()
        broker = broker_status()
        if database["ok"]:
            self.stdout.write(f"database: ok ({database['vendor']})")
        else:
            self.stderr.write(f"guardian: {describe_database_failure(database)}")
        if broker["ok"]:
            url = redact_url(settings.CELERY_BROKER_URL)
            self.stdout.write(f"broker: ok ({broker['transport']}, {url})")
        else:
            self.stderr.write(f"guardian: {describe_broker_failure(broker)}")
        if not (database["ok"] and broker["ok"]):
            sys.exit(2)
