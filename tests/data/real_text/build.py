"""Rebuild the fixed set of real text the local guardian's integrity tests read
(tests/adapters/test_local_integrity.py): the long descriptions of Python packages, written by
their authors (READMEs with code, tables and changelogs), cut into outputs of 200 to 6 000
characters, with each package's name, version and licence in the manifest.

It is fixed on purpose: read from whatever is installed, the figure moved with every release of
a dependency (and with Guardian's own README, which talks about injections). Rebuilding changes
what the tests measure; do it only with a reason, and re-measure the bounds.

    .venv/bin/python -m tests.data.real_text.build     # from the installed packages
"""

import gzip
import json
import sysconfig
from email.parser import HeaderParser
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHUNKS = HERE / "chunks.jsonl.gz"
MANIFEST = HERE / "MANIFEST.json"
CHUNK_SIZES = (200, 450, 900, 1600, 3000, 6000)
MAX_CHUNKS = 400
# Our own packages are not text others wrote.
OURS = ("guardian", "guardian_client", "guardian-client")


def _licence(headers) -> str:
    expression = headers.get("License-Expression")
    if expression:
        return expression.strip()
    classified = [
        c.split("::")[-1].strip()
        for c in headers.get_all("Classifier") or ()
        if c.startswith("License ::")
    ]
    if classified:
        return "; ".join(classified)
    licence = (headers.get("License") or "").strip()
    return licence.splitlines()[0][:80] if licence else ""


def documents() -> list[dict]:
    """The installed packages' long descriptions with a stated licence, in a fixed order."""
    site = Path(sysconfig.get_paths()["purelib"])
    out = []
    for path in sorted(site.glob("*.dist-info/METADATA")):
        text = path.read_text(encoding="utf-8", errors="replace")
        head, _, body = text.partition("\n\n")
        headers = HeaderParser().parsestr(head)
        name, licence = headers.get("Name", ""), _licence(headers)
        if name.lower().replace("-", "_") in {o.replace("-", "_") for o in OURS}:
            continue
        if len(body) >= 200 and licence:
            out.append(
                {
                    "name": name,
                    "version": headers.get("Version", ""),
                    "licence": licence,
                    "body": body,
                }
            )
    return out


def chunks(docs: list[dict]) -> list[dict]:
    """Documents cut at line ends into outputs of 200 to 6 000 characters, sizes in turn."""
    out: list[dict] = []
    turn = 0
    for doc in docs:
        body, start = doc["body"], 0
        while start < len(body) - 200 and len(out) < MAX_CHUNKS:
            size = CHUNK_SIZES[turn % len(CHUNK_SIZES)]
            turn += 1
            end = body.rfind("\n", start + 200, start + size)
            end = end if end > 0 else min(len(body), start + size)
            out.append({"source": doc["name"], "text": body[start:end]})
            start = end
    return out


def main() -> None:
    docs = documents()
    cut = chunks(docs)
    used = {c["source"] for c in cut}
    with gzip.open(CHUNKS, "wt", encoding="utf-8") as handle:
        for chunk in cut:
            handle.write(json.dumps(chunk, ensure_ascii=False) + "\n")
    manifest = [
        {"name": d["name"], "version": d["version"], "licence": d["licence"]}
        for d in docs
        if d["name"] in used
    ]
    MANIFEST.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cut)} chunks from {len(manifest)} packages → {CHUNKS.name}, {MANIFEST.name}")


if __name__ == "__main__":
    main()
