"""The append-only loop state, its hash, and the bounded projection the guardian sees."""

import glob
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.engine.canonical import canonical_json, sha256_hex
from guardian_core.engine.state import (
    HISTORY_WINDOW,
    HistoryItem,
    LoopState,
    PendingCall,
    project,
    state_apply,
    state_from_dict,
    state_hash,
    state_next,
    state_rebuild,
    state_step,
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


# ---- the state grows by steps: a bounded window, a hash chain, any version rebuilt -------


def _grown(turns: int) -> tuple[LoopState, list[dict]]:
    state, steps = STATE, []
    for i in range(turns):
        step = state_step(
            add_history=(HistoryItem(i, f"turn {i}: read_order done"),),
            last_results=(f"result {i}",),
            replanned=i % 7 == 3,
        )
        steps.append(step)
        state = state_apply(state, step)
    return state, steps


def test_the_state_keeps_a_bounded_window_of_history_and_counts_the_rest():
    state, _ = _grown(50)
    assert len(state.history) == HISTORY_WINDOW
    assert [h.turn for h in state.history] == list(range(50 - HISTORY_WINDOW, 50))
    assert state.history_dropped == 50 - HISTORY_WINDOW + len(STATE.history)
    assert len(canonical_json(state.to_dict())) < 2000  # the same at turn 50 as at 5000


def test_the_projection_of_the_windowed_state_is_the_projection_of_the_whole_history():
    state, _ = _grown(30)
    whole = LoopState(
        goal=state.goal,
        acceptance_criteria=state.acceptance_criteria,
        history=STATE.history
        + tuple(HistoryItem(i, f"turn {i}: read_order done") for i in range(30)),
        last_results=state.last_results,
        replans=state.replans,
    )
    assert project(state).data == project(whole).data
    assert project(state).data["truncated"]["history_dropped"] == len(whole.history) - 8


def test_any_version_is_rebuilt_from_the_recorded_steps_with_the_same_hash():
    live, steps = _grown(40)
    rebuilt = state_rebuild(STATE, steps)
    assert rebuilt == live
    assert state_hash(rebuilt) == state_hash(live)
    assert state_rebuild(STATE, steps[:10]) == _grown(10)[0]


def test_the_hash_chains_every_step_so_changing_an_old_one_changes_every_later_hash():
    live, steps = _grown(20)
    tampered = [dict(step) for step in steps]
    tampered[3] = {**tampered[3], "last_results": ["a different result"]}
    assert state_hash(state_rebuild(STATE, tampered)) != state_hash(live)
    # The next hash depends on the previous hash and the step alone, not on the history.
    step = state_step(add_history=(HistoryItem(99, "x"),))
    assert state_apply(live, step).hash == sha256_hex(["guardian-state/2", live.hash, step])


def test_the_compact_state_round_trips_through_json():
    live, _ = _grown(12)
    assert state_from_dict(json.loads(json.dumps(live.to_dict()))) == live
