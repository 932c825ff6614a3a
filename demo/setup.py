"""Demo users, the demo policy version, and the demo scenario runs for `make demo`."""

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError

from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS
from guardian_core.engine.thresholds import default_policy
from guardian_core.models import PolicyVersion
from policies.services import policy_version_create
from runs.models import Run

DEMO_ROLES = ("reviewer", "auditor", "admin")

# The demo policy asks DESIGN.md's typed questions in the guardians' built-in wording, under
# the built-in version: one wording, one label, so the log names what was really asked.
DEMO_QUESTIONS = dict(DEFAULT_QUESTIONS)
DEMO_QUESTION_SET_VERSION = DEFAULT_QUESTION_SET_VERSION


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


DEMO_INTEGRATOR = "integrator"
DEMO_INTEGRATOR_TOKEN_NAME = "demo agent loop (make demo)"


def demo_integrator_token() -> str:
    """A fresh API token for the demo's agent loop (the integrator role, which drives external
    runs), the earlier demo tokens revoked: like the passwords, new on every call."""
    from guardian_core.services import api_token_create, api_token_revoke

    user, _ = get_user_model().objects.get_or_create(username=DEMO_INTEGRATOR)
    user.set_unusable_password()  # a machine: it signs in with its token only
    user.save()
    user.groups.set([Group.objects.get(name=DEMO_INTEGRATOR)])
    for token in user.api_tokens.filter(name=DEMO_INTEGRATOR_TOKEN_NAME, revoked_at=None):
        api_token_revoke(token_id=token.pk)
    _, secret = api_token_create(user=user, name=DEMO_INTEGRATOR_TOKEN_NAME)
    return secret


def demo_policy_version() -> PolicyVersion:
    """The active policy version: on a migrated database the shipped default, version 1
    (guardian_core/migrations/0017); the same content made here when the table was emptied
    (a flushed database), and version 1 when one exists but none is active."""
    active = PolicyVersion.objects.filter(is_active=True).first()
    if active is not None:
        return active
    version = PolicyVersion.objects.filter(number=1).first()
    if version is not None:
        return version
    try:
        # Through the service, so the demo version passes the same validation as any other.
        return policy_version_create(
            number=1,
            label="Shipped defaults",  # what `migrate` makes: the same content
            thresholds={
                condition.value: threshold.as_dict()
                for condition, threshold in default_policy().thresholds.items()
            },
            question_set=DEMO_QUESTIONS,
            question_set_version=DEMO_QUESTION_SET_VERSION,
            activate=True,
        )
    except IntegrityError:  # another process created it first (the service's savepoint undid ours)
        return PolicyVersion.objects.get(number=1)


def demo_start_scenarios() -> list:
    """Start every demo scenario once (their turns run on the worker); [] when runs exist."""
    from runs.scenarios import scenario_names, scenario_run_start

    demo_policy_version()
    if Run.objects.exists():
        return []
    return [scenario_run_start(name) for name in scenario_names()]
