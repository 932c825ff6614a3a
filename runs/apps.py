"""App config for runs: runs, turns, decisions and tool calls."""

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
