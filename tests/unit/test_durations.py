"""The one duration/date parser and formatter: a bare number is minutes everywhere, as in Slurm."""

from datetime import datetime

import pytest

from slurmctl.durations import (
    human_duration,
    parse_duration,
    parse_slurm_duration,
    parse_slurm_timestamp,
    parse_when,
    slurm_time,
    until,
)


@pytest.mark.parametrize("text, seconds", [
    ("45", 2700), ("0:00", 0), ("1:02", 62), ("1:02:03", 3723), ("2-00:00:01", 172801), ("1-02", 93600),
    ("1-02:30", 95400), ("7-00:00:00", 604800), (" 3:04\n", 184),
    ("UNLIMITED", None), ("INVALID", None), ("N/A", None), ("", None), ("Partition_Limit", None), ("x:1", None),
])
def test_slurm_output_durations(text, seconds):
    assert parse_slurm_duration(text) == seconds


@pytest.mark.parametrize("value, seconds", [
    ("45", 2700), (45, 2700), ("45s", 45), ("0.5s", 0), ("90m", 5400), ("90min", 5400), ("2h", 7200),
    ("1.5h", 5400), ("1d", 86400), ("01:30:00", 5400), ("1-00:00:00", 86400), ("30:00", 1800),
])
def test_user_durations_a_bare_number_is_minutes(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "soon", "2 hours", "1:75", "01:61:00", True, "-5", "5m 2"])
def test_bad_durations_name_the_accepted_forms(value):
    with pytest.raises(ValueError, match="duration|above 59"):
        parse_duration(value)


def test_slurm_time_round_trips_through_the_parser():
    for seconds in (60, 3600, 86400 + 3600, 45 * 60):
        assert parse_slurm_duration(slurm_time(seconds)) == seconds
    assert slurm_time(61) == "00:02:00"


@pytest.mark.parametrize("seconds, text", [(None, "unknown"), (5, "5s"), (65, "1m05s"), (7500, "2h05m"),
                                           (3 * 86400 + 4 * 3600, "3d04h")])
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def test_dates():
    now = datetime(2026, 11, 30, 12, 0, 0)
    assert parse_when("7d", now) == datetime(2026, 11, 23, 12, 0, 0)
    assert parse_when("12h", now) == datetime(2026, 11, 30, 0, 0, 0)
    assert parse_when("2026-11-01", now) == datetime(2026, 11, 1)
    assert parse_when("now", now) == now
    for bad in ("45", "yesterday", ""):
        with pytest.raises(ValueError, match="not a date"):
            parse_when(bad, now)
    assert parse_slurm_timestamp("2026-11-29T13:22:00") == datetime(2026, 11, 29, 13, 22)
    assert parse_slurm_timestamp("N/A") is None and parse_slurm_timestamp("Unknown") is None
    assert until(None) == "no estimate yet" and until(now, now) == "now"
    assert until(datetime(2026, 11, 30, 14, 5, 0), now) == "in ~2h05m"


def test_parse_seconds_keeps_fractions_for_intervals():
    from slurmctl.durations import parse_seconds

    assert parse_seconds("0.3s") == pytest.approx(0.3)  # parse_duration would truncate it to a busy loop
    assert parse_seconds("1.5m") == 90.0 and parse_seconds("45") == 2700.0 and parse_seconds("01:00:00") == 3600.0
    with pytest.raises(ValueError):
        parse_seconds("soon")
