"""The append-only loop state, its hash, and the bounded projection the guardian sees."""

import glob
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.engine.canonical import canonical_json
from guardian_core.engine.state import (
    HistoryItem,
    LoopState,
    PendingCall,
    project,
    state_hash,
    state_next,
)
from tests.processes import REPO

STATE = LoopState(
    goal="Refund order ord_4472",
    acceptance_criteria=("The refund is issued", "The customer is told"),
    history=(HistoryItem(0, "read_order done"),),
    last_results=('{"order": "ord_4472", "total": 49.9, "note": "café ✓"}',),
)


def test_the_next_state_only_appends_to_history():
    after = state_next(STATE, add_history=(HistoryItem(1, "issue_refund done"),))
    assert after.history[: len(STATE.history)] == STATE.history
    assert after.version == STATE.version + 1
    assert STATE.history == (HistoryItem(0, "read_order done"),)  # the old version is untouched


def test_the_state_is_immutable():
    with pytest.raises(AttributeError):
        STATE.goal = "something else"  # type: ignore[misc]


def test_equal_states_have_equal_hashes_and_any_change_changes_the_hash():
    twin = LoopState(**{f: getattr(STATE, f) for f in STATE.__dataclass_fields__})
    assert state_hash(twin) == state_hash(STATE)
    assert state_hash(state_next(STATE)) != state_hash(STATE)
    assert len(state_hash(STATE)) == 64


def _other_pythons() -> list[str]:
    """This interpreter and any other CPython 3.11+ found on the machine."""
    found = {sys.executable}
    candidates = [
        "/usr/bin/python3",
        *glob.glob(os.path.expanduser("~/.pyenv/versions/3.1*/bin/python3")),
    ]
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            found.add(candidate)
    return sorted(found)


@pytest.mark.parametrize("python", _other_pythons())
def test_the_state_hash_is_the_same_in_another_process_and_python(python):
    # Hash randomisation and dict order differ between processes; the hash must not.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from guardian_core.engine.state import *;"
        "s = LoopState(goal='Refund order ord_4472',"
        " acceptance_criteria=('The refund is issued', 'The customer is told'),"
        " history=(HistoryItem(0, 'read_order done'),),"
        ' last_results=(\'{"order": "ord_4472", "total": 49.9, "note": "café ✓"}\',));'
        "print(state_hash(s))"
    )
    result = subprocess.run(
        [python, "-c", code, str(REPO)], capture_output=True, text=True, timeout=30, check=False
    )
    if "SyntaxError" in result.stderr or "cannot import name 'StrEnum'" in result.stderr:
        pytest.skip(f"{python} is older than the engine supports")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == state_hash(STATE)


def test_canonical_json_refuses_nan():
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"p": float("nan")})


def test_the_projection_has_the_trace_format_keys_and_marks_results_untrusted():
    data = project(STATE).data
    assert data["goal"] == STATE.goal
    assert data["acceptance_criteria"] == list(STATE.acceptance_criteria)
    assert data["history"] == [{"turn": 0, "summary": "read_order done"}]
    assert data["last_results"] == list(STATE.last_results)
    assert data["untrusted"] == ["last_results"]
    assert "truncated" not in data


def test_the_projection_keeps_only_the_last_k_history_items_and_says_so():
    long = state_next(STATE, add_history=tuple(HistoryItem(i, f"step {i}") for i in range(1, 20)))
    projection = project(long, history_limit=5)
    assert [h["turn"] for h in projection.data["history"]] == [15, 16, 17, 18, 19]
    assert projection.data["truncated"]["history_dropped"] == 15


def test_the_projection_drops_the_oldest_first_to_fit_its_budget():
    busy = state_next(
        STATE,
        add_history=tuple(HistoryItem(i, "x" * 300) for i in range(1, 8)),
        last_results=("a short result",),
    )
    projection = project(busy, max_chars=1500)
    assert len(canonical_json(projection.data)) <= 1500
    kept = [h["turn"] for h in projection.data["history"]]
    # Some dropped, some kept, and exactly the oldest ones went: the newest survive.
    assert 0 < len(kept) < 7
    assert kept == list(range(8 - len(kept), 8))
    assert projection.history_dropped == len(busy.history) - len(kept)
    assert projection.data["last_results"] == ["a short result"]  # results go only after


def test_the_projection_shows_one_pending_call_for_the_risk_check():
    pending = (
        PendingCall("read_order", "Read an order", {"order_id": "ord_1"}, "look"),
        PendingCall("issue_refund", "Refund money", {"order_id": "ord_1"}, "refund"),
    )
    state = state_next(STATE, pending=pending)
    assert project(state, pending_index=1).data["pending_proposal"]["tool"] == "issue_refund"
    assert "pending_proposal" not in project(state).data


@settings(max_examples=100)
@given(
    st.text(max_size=300),
    st.lists(st.text(max_size=500), max_size=6),
    st.lists(st.text(max_size=400), max_size=12),
    st.integers(min_value=1500, max_value=6000),
)
def test_the_projection_never_exceeds_its_budget(goal, results, summaries, budget):
    state = LoopState(
        goal=goal,
        history=tuple(HistoryItem(i, s) for i, s in enumerate(summaries)),
        last_results=tuple(results),
    )
    projection = project(state, max_chars=budget)
    assert len(canonical_json(projection.data)) <= budget
