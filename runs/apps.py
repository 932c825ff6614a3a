"""App config for runs: runs, turns, decisions and tool calls."""

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        # A log key that cannot seal (too short outside DEBUG) stops every process at start,
        # not at its first turn.
        from runs.chain import check_log_key

        check_log_key()
