"""`manage.py demo_setup`: demo users (one per role, passwords printed) and fixture runs."""

from django.core.management.base import BaseCommand

from guardian_core.demo import demo_seed, demo_users_ensure


class Command(BaseCommand):
    help = "Create the demo users (new passwords each time) and seed the demo runs once."

    def handle(self, *args, **options) -> None:
        seeded = demo_seed()
        self.stdout.write("Demo runs seeded." if seeded else "Demo runs already present.")
        self.stdout.write("Demo users (passwords are new on every run of this command):")
        for user in demo_users_ensure():
            self.stdout.write(f"  {user.username:<9} {user.password}")
