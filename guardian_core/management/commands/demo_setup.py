"""`manage.py demo_setup`: demo users (one per role, passwords printed) and the demo runs."""

from django.core.management.base import BaseCommand

from guardian_core.demo import demo_start_scenarios, demo_users_ensure


class Command(BaseCommand):
    help = "Create the demo users (new passwords each time) and start the demo scenarios once."

    def handle(self, *args, **options) -> None:
        started = demo_start_scenarios()
        if started:
            self.stdout.write(f"Started {len(started)} demo runs; the worker runs their turns.")
        else:
            self.stdout.write("Demo runs already present.")
        self.stdout.write("Demo users (passwords are new on every run of this command):")
        for user in demo_users_ensure():
            self.stdout.write(f"  {user.username:<9} {user.password}")
