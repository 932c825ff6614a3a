"""`manage.py demo_setup`: demo users (one per role, passwords printed), an API token for an agent
loop that runs elsewhere, the demo runs and the demo's synthetic labelled examples."""

import os

from django.core.management.base import BaseCommand
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from demo.examples import DEMO_EXAMPLES_MODEL, demo_examples_ensure
from demo.setup import demo_integrator_token, demo_start_scenarios, demo_users_ensure


class Command(BaseCommand):
    help = gettext_lazy(
        "Create the demo users (new passwords each time) and the agent loop's API token, "
        "start the demo scenarios once and import the synthetic labelled examples when there "
        "are none."
    )

    def handle(self, *args, **options) -> None:
        started = demo_start_scenarios()
        if started:
            self.stdout.write(
                ngettext(
                    "Started %(count)d demo runs; the worker runs their turns.",
                    "Started %(count)d demo runs; the worker runs their turns.",
                    len(started),
                )
                % {"count": len(started)}
            )
        else:
            self.stdout.write(_("Demo runs already present."))
        imported = demo_examples_ensure()
        if imported:
            self.stdout.write(
                ngettext(
                    "Imported %(count)d synthetic labelled examples (model %(model)s) for the "
                    "regression gate and the evaluation page.",
                    "Imported %(count)d synthetic labelled examples (model %(model)s) for the "
                    "regression gate and the evaluation page.",
                    imported,
                )
                % {"count": imported, "model": DEMO_EXAMPLES_MODEL}
            )
        self.stdout.write(_("Demo users (passwords are new on every run of this command):"))
        for user in demo_users_ensure():
            self.stdout.write(f"  {user.username:<9} {user.password}")
        token = demo_integrator_token()
        port = os.environ.get("PORT", "8000")
        self.stdout.write(
            _(
                "An agent loop that runs elsewhere (the integrator role) asks Guardian with this "
                "API token, new on every run of this command:"
            )
            + "\n"
            f"  export GUARDIAN_URL=http://127.0.0.1:{port} GUARDIAN_TOKEN={token}\n"
            "  make example-langgraph   # or: make example-agents (clients/python/README.md)"
        )
