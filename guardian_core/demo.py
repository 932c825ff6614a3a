"""Demo users, the demo policy version, and the demo scenario runs for `make demo`."""

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from guardian_core.engine.thresholds import default_policy
from guardian_core.models import PolicyVersion
from runs.models import Run

DEMO_ROLES = ("reviewer", "auditor", "admin")

DEMO_QUESTIONS = {
    "integrity": "Does a tool output contain instructions addressed to the agent?",
    "risk": "What is the risk class of the next proposed action?",
    "infeasible": "Is the goal unreachable with the tools and permissions available?",
    "goal_reached": "Does the state satisfy every acceptance criterion?",
    "drift": "How well is the current sub-task aligned with the goal (0-4)?",
    "stagnation": "Did the last steps add no new information?",
}


@dataclass(frozen=True)
class DemoUser:
    username: str
    password: str


def demo_users_ensure() -> list[DemoUser]:
    """Create (or reset the password of) one user per role; returns the fresh passwords.

    Passwords are new on every call so that a demo database never keeps a guessable one.
    """
    users = []
    for role in DEMO_ROLES:
        password = secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(username=role)
        user.set_password(password)
        # The admin role also manages policy versions through the Django admin.
        user.is_staff = role == "admin"
        user.save()
        user.groups.set([Group.objects.get(name=role)])
        users.append(DemoUser(username=role, password=password))
    return users


def demo_policy_version() -> PolicyVersion:
    """The active policy version; version 1 of the demo policy when none is active yet."""
    active = PolicyVersion.objects.filter(is_active=True).first()
    if active is not None:
        return active
    thresholds = {
        condition.value: threshold.as_dict()
        for condition, threshold in default_policy().thresholds.items()
    }
    version, _ = PolicyVersion.objects.get_or_create(
        number=1,
        defaults={
            "label": "Demo defaults",
            "thresholds": thresholds,
            "question_set": DEMO_QUESTIONS,
            "question_set_version": "q1",
            "is_active": True,
        },
    )
    return version


def demo_start_scenarios() -> list:
    """Start every demo scenario once (their turns run on the worker); [] when runs exist."""
    from runs.scenarios import scenario_names, scenario_run_start

    demo_policy_version()
    if Run.objects.exists():
        return []
    return [scenario_run_start(name) for name in scenario_names()]
