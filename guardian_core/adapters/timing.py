"""A shared deadline helper: ask several guardian questions at once and never wait past the
deadline.

Every guardian adapter (scripted, local, HTTP, OpenAI-compatible) asks its questions through
`ask_concurrently`, so a slow or failing question becomes a `Malformed` answer — which the
policy treats as uncertain and escalates (DESIGN.md, "Fail closed") — instead of stalling the
turn or raising out of it.
"""

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait

from guardian_core.engine.conditions import Malformed

# Enough threads for every question of a turn (six conditions, a handful of risk checks);
# more questions than this queue behind the first ones and still end at the deadline.
MAX_WORKERS = 16
ERROR_MESSAGE_CHARS = 300


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
    pool = ThreadPoolExecutor(
        max_workers=min(MAX_WORKERS, len(questions)), thread_name_prefix="guardian-ask"
    )
    try:
        futures: dict[K, Future] = {key: pool.submit(ask) for key, ask in questions.items()}
        # Only what was done when the wait ended counts: an answer that lands a moment later
        # is as late as one that never comes.
        done, _ = wait(futures.values(), timeout=max(0.0, deadline - time.monotonic()))
    finally:
        # Never join a straggler: waiting for it would carry this call past its deadline.
        pool.shutdown(wait=False, cancel_futures=True)
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
