"""Durations and dates: the one parser and the one formatter of each, for the whole package.

A bare number is MINUTES everywhere, as in Slurm (`sbatch --time=45` is 45 minutes): in run.yaml
`time_limit`, `dev --time`, site settings, watchdog settings and Slurm's own output. Write '45s'
for seconds.

Standard library only: the job (watchdog) and the node hooks import it as well as the CLI.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

# Slurm's time grammar (sbatch(1) --time): "minutes", "minutes:seconds", "hours:minutes:seconds",
# "days-hours", "days-hours:minutes", "days-hours:minutes:seconds".
_SLURM_RE = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_UNIT_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)")
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
# what Slurm prints where a limit or a time is not a number
_NO_LIMIT = frozenset({"", "INVALID", "UNLIMITED", "NOT_SET", "PARTITION_LIMIT", "N/A", "NONE"})
_NO_TIME = frozenset({"", "N/A", "Unknown", "None", "(null)"})


def _slurm_seconds(text: str) -> int | None:
    m = _SLURM_RE.fullmatch(text)
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if c is not None:  # hours:minutes:seconds
        return (int(a) * 60 + int(b)) * 60 + int(c)
    if b is not None:  # minutes:seconds
        return int(a) * 60 + int(b)
    return int(a) * 60  # minutes


def parse_slurm_duration(text: str) -> int | None:
    """A duration as Slurm prints it (squeue %M/%l/%L, sacct Timelimit, sinfo %l) -> seconds.

    '45' -> 2700 (minutes), '3:04' -> 184, '1:02:03' -> 3723, '2-00:00:01' -> 172801.
    None for UNLIMITED/INVALID/N/A and anything else that is not a duration: output never raises.
    """
    text = text.strip()
    if text.upper() in _NO_LIMIT:
        return None
    return _slurm_seconds(text)


def parse_duration(value: str | int) -> int:
    """A duration a person wrote -> seconds; ValueError (with the accepted forms) when it is none.

    '90m', '2h', '1d', '45s', '1.5h', and Slurm's forms: '45' (minutes), '01:30:00', '1-00:00:00'.
    An int is minutes too.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '2h' or '01:30:00'")
    if isinstance(value, int):
        return value * 60
    text = str(value).strip()
    m = _UNIT_RE.fullmatch(text)
    if m:
        return int(float(m.group(1)) * _UNIT_SECONDS[m.group(2)])
    m = _SLURM_RE.fullmatch(text)
    if m:
        _days, _lead, b, c = m.groups()
        if any(x is not None and int(x) > 59 for x in (b, c)):  # the clock fields after the first
            raise ValueError(f"'{text}' has minutes or seconds above 59")
        return _slurm_seconds(text)  # type: ignore[return-value]
    raise ValueError(f"'{text}' is not a duration; write '2h', '90m', '45s', '01:30:00' "
                     "(a bare number is minutes, as in Slurm)")


def parse_seconds(value: str | int) -> float:
    """Like parse_duration, but keeps fractions of a second ('0.3s', '1.5m'): for polling intervals
    and windows, where truncating '0.3s' to 0 would make a busy loop."""
    m = _UNIT_RE.fullmatch(str(value).strip()) if not isinstance(value, (bool, int)) else None
    if m:
        return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    return float(parse_duration(value))


def slurm_time(seconds: int) -> str:
    """Seconds -> Slurm's [D-]HH:MM:SS, rounded up to whole minutes (Slurm's granularity)."""
    minutes = -(-int(seconds) // 60)
    days, rem = divmod(minutes, 24 * 60)
    hours, mins = divmod(rem, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00" if days else f"{hours:02d}:{mins:02d}:00"


def human_duration(seconds: float | None) -> str:
    """Seconds -> '45s', '5m03s', '2h05m', '3d04h'; 'unknown' for None."""
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def parse_slurm_timestamp(text: str) -> datetime | None:
    """A time as Slurm prints it ('2026-11-29T13:22:00') -> datetime; None for N/A, Unknown, junk."""
    text = text.strip()
    if text in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def parse_when(value: str, now: datetime | None = None) -> datetime:
    """A date a person wrote -> datetime: 'YYYY-MM-DD', 'YYYY-MM-DDTHH:MM[:SS]', 'now', or an age
    ago ('7d', '12h', '90m', '1-00:00:00'). ValueError names the accepted forms."""
    now = (now or datetime.now()).replace(microsecond=0)
    text = value.strip()
    if text == "now":
        return now
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    if text and not text.isdigit():  # a bare number would be a year or minutes: refuse the guess
        try:
            return now - timedelta(seconds=parse_duration(text))
        except ValueError:
            pass
    raise ValueError(f"'{value}' is not a date; write YYYY-MM-DD, YYYY-MM-DDTHH:MM, 'now', "
                     "or an age such as '7d' or '12h' (that long ago)")


def until(when: datetime | None, now: datetime | None = None) -> str:
    """How far in the future `when` is: 'now', 'in ~2h05m', or 'no estimate yet' for None."""
    if when is None:
        return "no estimate yet"
    delta = (when - (now or datetime.now())).total_seconds()
    return "now" if delta <= 60 else f"in ~{human_duration(delta)}"
