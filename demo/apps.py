"""App config for `make demo`'s setup: demo people, a demo policy version, scenario runs and
labelled examples. It sits above every room (it fills them all) and nothing imports it."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "Demo setup"
