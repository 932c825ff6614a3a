"""`migrate` on a fresh database leaves one active policy version, the shipped defaults,
recorded as an activation; on a database that holds any policy version it adds none.

Each test takes the database back to the migration before the default's, sets the table as
the case needs, and migrates forward to today's, as `migrate` on that database would.
"""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS
from guardian_core.engine.thresholds import DEFAULT_COSTS, Threshold
from guardian_core.models import PolicyVersion
from policies.models import PolicyActivation
from tests.factories import make_policy_version

BEFORE_THE_DEFAULT = [("guardian_core", "0016_guardian_model_version_over")]


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def _migrate_to_latest() -> None:
    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def _empty_policy_table() -> None:
    # What the suite's own migrate left (the default, unless a flush emptied it) goes: the
    # table is as a fresh database's.
    PolicyActivation.objects.all().delete()
    PolicyVersion.objects.all().delete()


@pytest.mark.django_db(transaction=True)
def test_migrate_on_a_fresh_database_leaves_one_active_shipped_default_version():
    _migrate(BEFORE_THE_DEFAULT)
    _empty_policy_table()

    _migrate_to_latest()

    version = PolicyVersion.objects.get()  # exactly one
    assert (version.number, version.is_active, version.label) == (1, True, "Shipped defaults")
    assert version.thresholds == {
        condition.value: Threshold(*costs).as_dict() for condition, costs in DEFAULT_COSTS.items()
    }
    assert version.thresholds["integrity"]["t_star"] == pytest.approx(0.1)  # DESIGN.md's 1 : 9
    assert version.question_set == dict(DEFAULT_QUESTIONS)
    assert version.question_set_version == DEFAULT_QUESTION_SET_VERSION
    assert (version.quorum, version.judge, version.limits) == ({}, {}, {})
    assert version.problems() == []  # the engine can use it: runs can start
    activation = PolicyActivation.objects.get()
    assert (activation.version, activation.activated_by) == (version, None)
    assert "shipped default" in activation.comment
    assert not activation.override_reason


@pytest.mark.django_db(transaction=True)
def test_migrate_on_a_database_with_policy_versions_adds_none():
    _migrate(BEFORE_THE_DEFAULT)
    _empty_policy_table()
    # An upgrade, or an import into a new database: versions of its own, none active.
    mine = [make_policy_version(number=7), make_policy_version(number=12, label="imported")]

    _migrate_to_latest()

    assert list(PolicyVersion.objects.order_by("number")) == mine
    assert not PolicyVersion.objects.filter(is_active=True).exists()
    assert not PolicyActivation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_migrating_back_and_forth_keeps_the_one_default():
    _migrate(BEFORE_THE_DEFAULT)
    _empty_policy_table()
    _migrate_to_latest()
    first = PolicyVersion.objects.get()

    _migrate(BEFORE_THE_DEFAULT)  # going back leaves it: runs may be pinned to it
    assert list(PolicyVersion.objects.all()) == [first]
    _migrate_to_latest()

    assert list(PolicyVersion.objects.all()) == [first]
    assert PolicyActivation.objects.count() == 1
