"""A shared deadline helper: ask several guardian questions at once and never wait past the
deadline.

Every guardian adapter (scripted, local, HTTP, OpenAI-compatible) asks its questions through
`ask_concurrently`, so a slow or failing question becomes a `Malformed` answer — which the
policy treats as uncertain and escalates (DESIGN.md, "Fail closed") — instead of stalling the
turn or raising out of it.
"""

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait

from guardian_core.engine.conditions import Malformed

# The process's questions in flight at once, every call's together: threads are made as
# calls need them and kept. High, because a question queued behind other turns' slow network
# answers (an HTTP guardian's, in a threaded web worker) could miss its own deadline; more
# than this queue behind the first ones and still end at the deadline.
MAX_WORKERS = 128
ERROR_MESSAGE_CHARS = 300

# The process's threads for questions, kept between calls: starting a thread for every call
# cost about as much as a local guardian's answer. Only a pool no question has outlived its
# deadline on is shared (_pool_retire), and only in the process that made it (a forked worker
# inherits the object, not its threads).
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _pool_shared() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (
                os.getpid(),
                ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="guardian-ask"),
            )
        return _pool[1]


def _pool_retire(pool: ThreadPoolExecutor) -> None:
    """A question outlived its deadline on `pool`: later calls get a fresh pool, so a stalled
    question never holds theirs up. Questions queued on it still run (another call may be
    waiting for them); its threads end once they are done, a stalled one when it returns."""
    global _pool
    with _pool_lock:
        if _pool is not None and _pool[1] is pool:
            _pool = None
    pool.shutdown(wait=False)


def ask_concurrently[K](
    questions: Mapping[K, Callable[[], object]], *, deadline_seconds: float
) -> dict[K, object]:
    """Run every callable concurrently and return {key: result} in the order of `questions`.

    Waits at most `deadline_seconds` in total. A question not done by then becomes
    Malformed("guardian timed out after X s"); one that raised becomes
    Malformed("guardian error: <Type>: <message>"). Stragglers are abandoned, not joined: the
    caller gets its answers on time and the stray thread ends on its own (the interpreter waits
    for it only at exit, so a question should carry its own timeout, as an HTTP call does).
    """
    if not questions:
        return {}
    deadline = time.monotonic() + max(0.0, deadline_seconds)
    pool = _pool_shared()
    futures: dict[K, Future] = {}
    try:
        for key, ask in questions.items():
            futures[key] = pool.submit(ask)
        # Only what was done when the wait ended counts: an answer that lands a moment later
        # is as late as one that never comes.
        done, late = wait(futures.values(), timeout=max(0.0, deadline - time.monotonic()))
    except BaseException:
        _pool_retire(pool)
        raise
    if late:
        # Never join a straggler: waiting for it would carry this call past its deadline.
        for future in late:
            future.cancel()  # one still queued never runs
        _pool_retire(pool)
    return {
        key: _outcome(future, future in done, deadline_seconds) for key, future in futures.items()
    }


def _outcome(future: Future, in_time: bool, deadline_seconds: float) -> object:
    if not in_time or future.cancelled():
        return Malformed(f"guardian timed out after {deadline_seconds:g} s")
    error = future.exception()
    if error is not None:
        return Malformed(f"guardian error: {type(error).__name__}: {error}"[:ERROR_MESSAGE_CHARS])
    return future.result()
