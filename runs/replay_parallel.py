"""Decision replay spread over processes: whole runs, and a long run cut into segments of its
decided turns, each replayed in a child process with its own database connection.

A segment needs the state the turns before it leave (runs/replay.py, `ReplayState`: the
replans and the policy's window). Reading every earlier turn again in each child would cost
most of what it saves, so a child starts from a cheap guess (`replay_state_guess`) and
reports the state it assumed and the state it ended in. The parent takes the segments in order
and accepts one only when its assumed state is the state the segment before it ended in; a
segment whose guess was wrong (a malformed row before it, which replay passes over) is replayed
again from the right state. What comes out is what one pass in one process gives, in the same
order, whatever the number of workers.

Children are forked (they inherit the settings, the test database's name included) after the
parent has closed its connections, so no child talks over the parent's socket; each opens its
own and closes it at the end of each task.
"""

import math
import multiprocessing
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field

from django.db import connection, connections
from django.db.models import Count, Max, Min

from runs import mapping
from runs.models import Run, Turn
from runs.replay import (
    DIFFERENT,
    IDENTICAL,
    ReplayState,
    TurnReplay,
    _Carry,
    replay_rows,
    replay_state_guess,
    run_replay,
)

# A segment shorter than this is not worth a guess and a process's task (~60 µs a decision:
# 5 000 turns are a third of a second).
MIN_SEGMENT = 5_000
# Tasks per worker: enough to even out runs of different lengths, few enough that each task's
# connection and guess stay small against its turns.
TASKS_PER_WORKER = 4


@dataclass(frozen=True)
class Segment:
    """Decided turns of one run: those with `start <= index < stop` (stop None: to the end)
    are replayed; `read_from` is where reading starts (before `start` for the run page, whose
    turns before the page only carry the state)."""

    run_id: int
    start: int
    stop: int | None = None
    read_from: int | None = None  # None: `start`
    limit: int | None = None


@dataclass
class SegmentResult:
    """One segment replayed. `assumed` is the state it started from when that was a guess
    (None: from the run's first turn, or from a state it was given); `end` the state after its
    last turn. `results` holds every turn's replay when asked to keep all, else only those
    that differ; the counts cover every turn."""

    segment: Segment
    assumed: ReplayState | None
    end: ReplayState
    identical: int = 0
    different: int = 0
    not_replayable: int = 0
    results: list[TurnReplay] = field(default_factory=list)
    # A run whose policy version cannot be replayed (stored before versions were checked).
    cannot: str = ""


class ReplayWorkerError(Exception):
    """A segment's replay raised: which run and turns, and what (the child's traceback is the
    exception's cause). Its arguments are its message and segment, so it crosses from a child
    to the parent intact."""

    @classmethod
    def of(cls, segment: Segment, exc: BaseException) -> "ReplayWorkerError":
        stop = "end" if segment.stop is None else segment.stop - 1
        return cls(
            f"run {segment.run_id} turns {segment.start}–{stop}: replay failed: "
            f"{type(exc).__name__}: {exc}",
            segment,
        )

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def segment(self) -> Segment:
        return self.args[1]


def default_workers() -> int:
    return os.cpu_count() or 1


def parallel_possible() -> bool:
    """Whether children can be forked and see what this process sees: not inside a
    transaction (they would not see its rows, and closing the connection would end it), not
    on an in-memory SQLite database, and not from a process running other threads (a forked
    child would inherit their locks held; a threaded development server replays in
    process)."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and not connection.in_atomic_block
        and not (connection.vendor == "sqlite" and connection.is_in_memory_db())
        and _single_threaded()
    )


def _single_threaded() -> bool:
    return threading.active_count() == 1


def plan_all(*, run_ids: Sequence[int], workers: int) -> list[list[Segment]]:
    """Tasks for replaying `run_ids` (in that order): consecutive short runs grouped, a long
    run cut into segments by turn index, each task about total / (workers × TASKS_PER_WORKER)
    decided turns and no smaller than MIN_SEGMENT. With one worker, one task per run."""
    if workers <= 1:
        return [[Segment(run_id, 0)] for run_id in run_ids]
    spans = {
        row["run_id"]: row
        for row in Turn.objects.filter(decision__isnull=False)
        .values("run_id")
        .annotate(n=Count("id"), low=Min("index"), high=Max("index"))
        .order_by()
    }
    total = sum(row["n"] for row in spans.values())
    size = max(MIN_SEGMENT, math.ceil(total / (workers * TASKS_PER_WORKER)))
    tasks: list[list[Segment]] = []
    current: list[Segment] = []
    filled = 0
    for run_id in run_ids:
        span = spans.get(run_id)
        n = span["n"] if span else 0
        if n <= size:
            if filled + n > size and current:
                tasks.append(current)
                current, filled = [], 0
            current.append(Segment(run_id, 0))
            filled += n
            continue
        if current:
            tasks.append(current)
            current, filled = [], 0
        # Cut by index: a run's decided turns are numbered nearly without gaps.
        pieces = math.ceil(n / size)
        width = math.ceil((span["high"] + 1 - span["low"]) / pieces)
        bounds = [span["low"] + k * width for k in range(1, pieces)]
        starts = [0, *bounds]
        stops = [*bounds, None]
        tasks.extend([Segment(run_id, a, b)] for a, b in zip(starts, stops, strict=True))
    if current:
        tasks.append(current)
    return tasks


def replay_segments(
    tasks: Sequence[Sequence[Segment]], *, workers: int, keep_all: bool = False
) -> Iterator[SegmentResult]:
    """Replay the tasks' segments and yield their results in order (a run's segments in
    index order), checked: a segment that started from a wrong guess is replayed again from
    the state the one before it ended in. Raises ReplayWorkerError when a segment's replay
    raised, in a child or here, after the segments before it were yielded."""
    workers = min(workers, len(tasks))
    ended: dict[int, ReplayState] = {}
    if workers <= 1 or not parallel_possible():

        def again(segment: Segment, state: ReplayState) -> SegmentResult:
            return _replay_task_here([segment], keep_all=keep_all, states=[state])[0]

        for task in tasks:
            results = _replay_task_here(task, keep_all=keep_all, states=None)
            yield from _checked(results, rerun=again, ended=ended)
        return
    # The children are forked at the first submit: no connection may be open then.
    connections.close_all()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:

        def rerun(segment: Segment, state: ReplayState) -> SegmentResult:
            return pool.submit(_replay_task, [segment], keep_all, [state]).result()[0]

        futures: list[Future] = [pool.submit(_replay_task, list(task), keep_all) for task in tasks]
        try:
            for task, future in zip(tasks, futures, strict=True):
                try:
                    results = future.result()
                except ReplayWorkerError:
                    raise
                except Exception as exc:  # the pool itself broke (a child killed)
                    raise ReplayWorkerError.of(task[0], exc) from exc
                yield from _checked(results, rerun=rerun, ended=ended)
        finally:
            for future in futures:
                future.cancel()


def _checked(
    results: list[SegmentResult], *, rerun, ended: dict[int, ReplayState]
) -> Iterator[SegmentResult]:
    """The results in order, each checked against the state its run's previous segment ended
    in (`ended`, updated): a wrong guess is replayed again with `rerun(segment, state)`."""
    for result in results:
        segment = result.segment
        if result.assumed is not None and result.assumed != ended.get(segment.run_id):
            # The guess missed: the state the segment before it really ended in is known now.
            result = rerun(segment, ended[segment.run_id])
        ended[segment.run_id] = result.end
        yield result


def _replay_task(
    task: list[Segment], keep_all: bool, states: list[ReplayState] | None = None
) -> list[SegmentResult]:
    """In a child: replay the task's segments on a connection of its own, closed at the end.
    Returns one SegmentResult per segment; raises ReplayWorkerError naming the segment."""
    try:
        return _replay_task_here(task, keep_all=keep_all, states=states)
    finally:
        connections.close_all()


def _replay_task_here(
    task: Sequence[Segment], *, keep_all: bool, states: list[ReplayState] | None
) -> list[SegmentResult]:
    out = []
    for n, segment in enumerate(task):
        try:
            out.append(
                _replay_segment(segment, keep_all=keep_all, state=states[n] if states else None)
            )
        except ReplayWorkerError:
            raise
        except Exception as exc:
            raise ReplayWorkerError.of(segment, exc) from exc
    return out


def _replay_segment(
    segment: Segment, *, keep_all: bool, state: ReplayState | None
) -> SegmentResult:
    run = Run.objects.select_related("policy_version").get(pk=segment.run_id)
    read_from = segment.start if segment.read_from is None else segment.read_from
    try:
        policy = None if run.actor == "coder_reviewer" else mapping.policy_for_run(run)
    except ValueError as exc:  # a policy version stored before versions were checked
        return SegmentResult(segment, None, ReplayState(), cannot=str(exc))
    assumed = None
    if policy is None:  # coder ⇄ reviewer rounds: not replayed, nothing carried
        carry_state = ReplayState()
        replays = run_replay(
            run=run, start_index=segment.start, stop_index=segment.stop, limit=segment.limit
        )
    else:
        if state is not None:
            carry_state = state
        elif read_from > 0:
            carry_state = assumed = replay_state_guess(
                run_id=run.pk, policy=policy, before_index=read_from
            )
        else:
            carry_state = ReplayState()
        carry = _Carry(policy, carry_state)
        replays = replay_rows(
            run_id=run.pk,
            policy=policy,
            carry=carry,
            read_from=read_from,
            start_index=segment.start,
            stop_index=segment.stop,
            limit=segment.limit,
        )
    result = SegmentResult(segment, assumed, ReplayState())
    for replayed in replays:
        if replayed.status == IDENTICAL:
            result.identical += 1
        elif replayed.status == DIFFERENT:
            result.different += 1
        else:
            result.not_replayable += 1
        if keep_all or replayed.status == DIFFERENT:
            result.results.append(replayed)
    result.end = carry_state if policy is None else carry.state()
    return result


def replay_page(*, run: Run, start_index: int, limit: int, workers: int) -> list[TurnReplay]:
    """The run page's replay of `limit` turns from `start_index`, with the decided turns
    before it (read only for the state they leave) spread over `workers` processes. The same
    turns, in the same order, as run_replay(run=run, start_index=…, limit=…)."""
    span = Turn.objects.filter(
        run_id=run.pk, decision__isnull=False, index__lt=start_index
    ).aggregate(low=Min("index"))
    low = span["low"] or 0
    pieces = max(1, min(workers, math.ceil((start_index - low) / MIN_SEGMENT)))
    width = math.ceil((start_index - low) / pieces)
    # Each segment before the page only carries the state (nothing it reads is at or after
    # `start_index`); the last reads from the page's first turn and replays the page.
    bounds = [0, *(low + k * width for k in range(1, pieces))]
    tasks = [
        [Segment(run.pk, start_index, stop, read_from=bound)]
        for bound, stop in zip(bounds, [*bounds[1:], start_index], strict=True)
    ]
    tasks.append([Segment(run.pk, start_index, None, read_from=start_index, limit=limit)])
    results: list[TurnReplay] = []
    for result in replay_segments(tasks, workers=workers, keep_all=True):
        if result.cannot:
            raise ValueError(result.cannot)
        results.extend(result.results)
    return results
