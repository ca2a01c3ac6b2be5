"""Deliver a message to the run's channels, once, within the run's rate limit, and journal it.

The journal is the run dir's notifications.jsonl (written as the user, like every file of the run):
one line per message with its event, its dedup key, and per channel the key, the kind and whether it
went (never the URL). ``status``, ``ls`` and the web Run page read it to show where messages went.

Sending holds an flock on the journal: the background `started` sender, the end of the job, the
watchdog and the pending watcher may race, and the dedup key must be checked and written at once.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl import rundir
from slurmctl.fsutil import append_jsonl, read_jsonl
from slurmctl.notify.channels import resolve_channels, send

HOUR = 3600.0


@dataclass
class Message:
    event: str  # started | failed | recovered | finished | stalled | pending
    key: str  # dedup: one message per key per run (e.g. "failed:<job id>:<restart count>")
    title: str
    body: str
    fields: dict = field(default_factory=dict)  # the webhook's JSON (besides event, run, title, text)

    def payload(self, run_id: str) -> dict:
        return {"event": self.event, "run_id": run_id, "title": self.title, "text": self.body, **self.fields}


def journal_path(run_dir: Path) -> Path:
    return Path(run_dir) / rundir.NOTIFICATIONS


def sent_records(run_dir: Path) -> list[dict]:
    return read_jsonl(journal_path(run_dir))


def deliver(run_dir: Path, run_id: str, settings: dict, message: Message, secrets_file: Path,
            now: float | None = None) -> dict | None:
    """Send `message` unless its event is not wanted, its key was sent already or the run used up its
    hourly allowance; returns the journal record (None when nothing was due)."""
    if message.event not in settings.get("events", ()):
        return None
    now = time.time() if now is None else now
    path = journal_path(run_dir)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        records = sent_records(run_dir)
        if any(r.get("key") == message.key for r in records):
            return None
        recent = sum(1 for r in records if r.get("sent") and now - float(r.get("time") or 0) < HOUR)
        record = {"time": now, "event": message.event, "key": message.key, "title": message.title}
        if recent >= int(settings.get("max_per_hour", 12)):
            record.update(sent=False, suppressed=f"rate limit: {recent} messages in the last hour")
            append_jsonl(path, record)
            return record
        channels, problems = resolve_channels(list(settings.get("channels", ())), secrets_file)
        results = [{"channel": c.key, "kind": c.kind,
                    "error": send(c, message.title, message.body, message.payload(run_id), thread=run_id)}
                   for c in channels]
        results += [{"channel": None, "kind": None, "error": p} for p in problems]
        record.update(sent=any(r["error"] is None for r in results), channels=results)
        append_jsonl(path, record)
        return record
    finally:
        os.close(fd)
