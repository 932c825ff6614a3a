"""`manage.py demo_setup`: demo users (one per role, passwords printed), an API token for an agent
loop that runs elsewhere, the demo runs and the demo's synthetic labelled examples."""

import os

from django.core.management.base import BaseCommand

from demo.examples import DEMO_EXAMPLES_MODEL, demo_examples_ensure
from demo.setup import demo_integrator_token, demo_start_scenarios, demo_users_ensure


class Command(BaseCommand):
    help = (
        "Create the demo users (new passwords each time) and the agent loop's API token, "
        "start the demo scenarios once and import the synthetic labelled examples when there "
        "are none."
    )

    def handle(self, *args, **options) -> None:
        started = demo_start_scenarios()
        if started:
            self.stdout.write(f"Started {len(started)} demo runs; the worker runs their turns.")
        else:
            self.stdout.write("Demo runs already present.")
        imported = demo_examples_ensure()
        if imported:
            self.stdout.write(
                f"Imported {imported} synthetic labelled examples (model {DEMO_EXAMPLES_MODEL}) "
                "for the regression gate and the evaluation page."
            )
        self.stdout.write("Demo users (passwords are new on every run of this command):")
        for user in demo_users_ensure():
            self.stdout.write(f"  {user.username:<9} {user.password}")
        token = demo_integrator_token()
        port = os.environ.get("PORT", "8000")
        self.stdout.write(
            "An agent loop that runs elsewhere (the integrator role) asks Guardian with this API "
            "token, new on every run of this command:\n"
            f"  export GUARDIAN_URL=http://127.0.0.1:{port} GUARDIAN_TOKEN={token}\n"
            "  make example-langgraph   # or: make example-agents (clients/python/README.md)"
        )
