"""Signed run archives: a finished run's export (runs/audit.py run_export) with its chain head,
signed under the decision log's key, written atomically; and the offline check of one
(`manage.py verify_log --file ARCHIVE`), which needs the key but no database.

Why it looks like this:

- **Signed under the log's key.** The MAC is HMAC-SHA256 under the key that seals the log
  (runs/chain.py), over a label and the canonical JSON of every field but the signature; the
  signature names the key's id, so an archive made before a key rotation verifies while the old
  key is kept in GUARDIAN_LOG_OLD_KEYS. The label keeps an archive's MAC from ever standing for
  a decision's seal, which is made under the same key.
- **The chain inside is checked again.** The signature shows the file is the one Guardian
  wrote; recomputing every decision's seal and the run's seal from the export (what
  verify_log checks in the database) shows the run it holds was intact when it was written,
  and names the turn of anything altered, even by someone who could sign.
- **Atomic.** Written to a temporary file in the same directory, flushed to disk, then renamed
  over the final name: a reader sees the whole archive or none, never half of one.
"""

import hashlib
import hmac
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from django.utils import timezone

from guardian_core.engine.canonical import canonical_json
from runs import chain
from runs.audit import EXPORT_FORMAT, run_chain_head, run_export
from runs.models import Run

ARCHIVE_FORMAT = "guardian-run-archive/1"
SIGNATURE_ALGORITHM = "HMAC-SHA256"
# Prefixed to what is signed: an archive's MAC is never a decision's or a run's seal.
SIGNATURE_LABEL = b"guardian run archive v1\n"


class ArchiveProblem(ValueError):
    """The archive cannot be written; the message says why."""


def _signed_bytes(body: Mapping) -> bytes:
    return SIGNATURE_LABEL + canonical_json(body).encode("utf-8")


def archive_sign(body: Mapping, keys: chain.LogKeys | None = None) -> dict:
    """The signature of an archive's body (every field but "signature") under the log's
    current key: {"algorithm", "key" (the key's id), "mac"}."""
    keys = keys or chain.log_keys()
    mac = hmac.new(keys.current, _signed_bytes(body), hashlib.sha256).hexdigest()
    return {"algorithm": SIGNATURE_ALGORITHM, "key": keys.current_id, "mac": mac}


def archive_document(run: Run, *, reason: str = "") -> dict:
    """The signed archive of `run`: its export, its id and uid here, its chain head (the last
    decision's seal), when and why it was archived, and the signature."""
    export = run_export(run)
    body = {
        "format": ARCHIVE_FORMAT,
        "archived_at": timezone.now().isoformat(),
        "reason": reason,
        "run_id": run.pk,
        "run_uid": str(run.uid),
        "head_hash": run_chain_head(run),
        "export": export,
    }
    return {**body, "signature": archive_sign(body)}


def archive_name(run: Run) -> str:
    return f"run-{run.pk}-{run.uid}.json"


def archive_write(document: Mapping, directory: Path, name: str) -> Path:
    """Write `document` as `directory/name` atomically (a temporary file in the same directory,
    flushed, renamed over the name, the directory flushed): a crash leaves the old file or the
    new one, never a part. The directory is made (private to this user) if missing."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / name
    data = json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform that cannot open a directory: the rename is still atomic
        return target
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return target


# ---- the offline check ----------------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveReport:
    """What checking one archive found: the run it holds and every problem, in words."""

    path: str
    run_id: int | None = None
    run_uid: str = ""
    decisions: int = 0
    head: str = ""
    key: str = ""
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        if self.ok:
            count = f"{self.decisions} decision{'' if self.decisions == 1 else 's'}"
            return (
                f"archive {self.path}: run {self.run_id} ({self.run_uid}), {count}, signature "
                f"valid (key {self.key}), chain intact, head {self.head or '(none)'}"
            )
        return "; ".join(f"archive {self.path}: {problem}" for problem in self.problems)


def archive_check_file(path: str | Path) -> ArchiveReport:
    """Check the archive at `path` offline: it reads as JSON, its signature holds under a
    configured log key, and the chain it holds verifies (runs/chain.py log_check)."""
    shown = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        return ArchiveReport(shown, problems=(f"cannot be read ({exc.strerror or exc})",))
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return ArchiveReport(
            shown, problems=(f"is not a JSON document (altered or cut short: {exc})",)
        )
    return archive_check(document, path=shown)


def archive_check(document: object, *, path: str = "(archive)") -> ArchiveReport:
    """Check an archive's document (see archive_check_file): every problem is named."""
    if not isinstance(document, dict) or document.get("format") != ARCHIVE_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        return ArchiveReport(path, problems=(f"not a run archive (format {found!r})",))
    problems = list(_signature_problems(document))
    export = document.get("export")
    report = None
    if not isinstance(export, dict) or export.get("format") != EXPORT_FORMAT:
        problems.append("holds no run export")
    else:
        try:
            report = export_log_check(export, run_id=document.get("run_id"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problems.append(f"the run export inside is malformed ({type(exc).__name__}: {exc})")
    if report is not None:
        problems.extend(f"chain: {line}" for line in report.lines())
        if str(document.get("run_uid")) != report.run_uid:
            problems.append(f"names run {document.get('run_uid')} but holds run {report.run_uid}")
        if document.get("head_hash") != report.head:
            problems.append(
                f"its chain head {document.get('head_hash')!r} is not the last decision's "
                f"seal {report.head!r} (decisions were cut or added)"
            )
    return ArchiveReport(
        path,
        run_id=document.get("run_id"),
        run_uid=str(document.get("run_uid", "")),
        decisions=report.decisions if report else 0,
        head=report.head if report else "",
        key=str((document.get("signature") or {}).get("key", "")),
        problems=tuple(problems),
    )


def _signature_problems(document: dict) -> list[str]:
    signature = document.get("signature")
    if not isinstance(signature, dict) or not signature.get("mac"):
        return ["has no signature (it was stripped, or the file is not a Guardian archive)"]
    if signature.get("algorithm") != SIGNATURE_ALGORITHM:
        return [f"is signed with {signature.get('algorithm')!r}, not {SIGNATURE_ALGORITHM}"]
    keys = chain.log_keys()
    key = keys.keys.get(str(signature.get("key") or ""))
    if key is None:
        return [
            f"is signed under an unknown key {signature.get('key')} (not GUARDIAN_LOG_KEY "
            "nor GUARDIAN_LOG_OLD_KEYS)"
        ]
    body = {name: value for name, value in document.items() if name != "signature"}
    try:
        expected = hmac.new(key, _signed_bytes(body), hashlib.sha256).hexdigest()
    except (TypeError, ValueError) as exc:
        return [f"cannot be signed again to compare ({exc})"]
    if not hmac.compare_digest(str(signature["mac"]), expected):
        return ["signature does not match its content (the archive was altered after signing)"]
    return []


# The policy version a decision of an export was made under: an export holds the run's one
# version (run_import pins every decision to it), named here by a stand-in id.
_EXPORT_POLICY = 0


def export_log_check(export: Mapping, *, run_id: object = None) -> chain.ChainReport:
    """chain.log_check over a run export (runs/audit.py run_export) instead of the database:
    the same seals over the same story, read from the document."""
    run_data = export["run"]
    number = int(export["policy_version"]["number"])
    run = {
        **{name: run_data[name] for name in chain.RUN_HEADER_FIELDS},
        "id": run_id if isinstance(run_id, int) else 0,
        "uid": run_data["uid"],
        "status": run_data["status"],
        "stop_reason": run_data["stop_reason"],
        "final_answer": run_data["final_answer"],
        "seal": run_data.get("seal"),
        "policy_version_id": _EXPORT_POLICY,
    }
    turns = sorted(export["turns"], key=lambda turn: turn["index"])
    decisions = [
        {
            **{name: turn["decision"][name] for name in chain.HASHED_FIELDS},
            "content_hash": turn["decision"]["content_hash"],
            "seal_key": turn["decision"].get("seal_key", ""),
            "policy_version_id": _EXPORT_POLICY,
            "turn_index": turn["index"],
            "turn": {name: turn.get(name) for name in chain.TURN_FIELDS},
        }
        for turn in turns
        if turn.get("decision") is not None
    ]
    calls = {turn["index"]: list(turn.get("tool_calls") or []) for turn in turns}
    stories = export_stories(export)
    decided = {row["turn_index"] for row in decisions}
    return chain.log_check(
        run=run,
        policy_number_of=lambda _version: number,
        decisions=decisions,
        calls_of=lambda index: calls.get(index, []),
        stories=stories,
        undecided_escalations=sorted(set(stories) - decided),
    )


def export_stories(export: Mapping) -> dict[int, list[dict]]:
    """The export's escalations by turn index as runs/sealing.py stories() reads them from
    the database: audit samples left out (no part of the story), in the order they were
    opened, each with its verdict, approvals and labelled examples."""
    by_turn: dict[int, list[dict]] = {}
    for escalation in export.get("escalations") or []:
        if escalation["kind"] == "audit_sample":
            continue
        verdict = escalation.get("verdict")
        by_turn.setdefault(escalation["turn_index"], []).append(
            {
                **{name: escalation.get(name) for name in chain.ESCALATION_FIELDS},
                "verdict": verdict,
                "approvals": list(escalation.get("approvals") or []),
                "examples": list((verdict or {}).get("examples") or []),
            }
        )
    return by_turn
