"""The change list of a reviewer's edit to a call's arguments, and its words (pure)."""

from guardian_core.engine.argument_edits import (
    ArgumentChange,
    argument_changes,
    edited_arguments_words,
)


def test_a_changed_amount_is_one_change_said_as_before_and_after():
    changes = argument_changes(
        {"amount": 49.9, "order_id": "o1"}, {"amount": 39.9, "order_id": "o1"}
    )
    assert changes == [ArgumentChange("amount", 49.9, 39.9)]
    assert edited_arguments_words({"amount": 49.9}, {"amount": 39.9}) == (
        "approved with edited arguments: amount 49.9 → 39.9"
    )


def test_added_removed_and_nested_fields_are_each_named():
    changes = argument_changes(
        {"a": 1, "gone": "x", "to": {"city": "Paris", "zip": "75001"}},
        {"a": 1, "new": True, "to": {"city": "Lyon", "zip": "75001"}},
    )
    assert [c.as_dict() for c in changes] == [
        {"field": "gone", "before": "x"},
        {"field": "new", "after": True},
        {"field": "to.city", "before": "Paris", "after": "Lyon"},
    ]
    assert [c.words() for c in changes] == [
        'gone "x" → (absent)',
        "new (absent) → true",
        'to.city "Paris" → "Lyon"',
    ]


def test_true_and_one_differ_and_equal_arguments_give_nothing():
    assert argument_changes({"n": 1}, {"n": True}) == [ArgumentChange("n", 1, True)]
    assert argument_changes({"n": [1, 2]}, {"n": [1, 2]}) == []
    assert edited_arguments_words({"n": 1}, {"n": 1}) == ""


def test_a_long_value_is_cut_in_words_but_kept_whole_in_the_change_list():
    long = "x" * 10_000
    (change,) = argument_changes({"note": ""}, {"note": long})
    assert change.after == long
    assert len(change.words()) < 200
    assert edited_arguments_words({"n": 1}, {"n": 2}, tool="t", position=3) == (
        "call 3 (t) approved with edited arguments: n 1 → 2"
    )
