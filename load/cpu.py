"""CPU time of the stack's processes, read from /proc/<pid>/stat (Linux).

A process's figure is its own user and system time plus that of the children it has reaped
(cutime, cstime): PostgreSQL forks a backend per connection and reaps it when it closes, so
the postmaster's figure holds every backend that ended, and the live ones are added from their
own lines. A tree is its root and every descendant alive at the reading."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds with reaped children), or None for a process gone."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = line[line.rindex(")") + 2 :].split()
    # After "pid (comm) ": state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based
    # from the state field.
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return int(fields[1]), ticks / TICKS


def tree_seconds(roots: dict[str, int]) -> dict[str, float]:
    """{name: CPU seconds of the root's process tree} for each named root pid."""
    table: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    seconds = {}
    for name, root in roots.items():
        total, queue = 0.0, [root]
        while queue:
            pid = queue.pop()
            if pid in table:
                total += table[pid][1]
                queue.extend(children.get(pid, []))
        seconds[name] = total
    return seconds


def machine_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / TICKS, sum(values) / TICKS


def stack_roots(stack) -> dict[str, int]:
    """The server's processes by name: gunicorn (master and workers), each Celery worker,
    beat, PostgreSQL (the postmaster and its backends) and Redis."""
    roots = {name: proc.popen.pid for name, proc in stack.procs.items() if proc.popen}
    postmaster = stack.pgdata / "postmaster.pid"
    roots["postgres"] = int(postmaster.read_text().split("\n", 1)[0])
    roots["redis"] = int((stack.redis_dir / "redis.pid").read_text().strip())
    return roots
