"""`slurmctl compare`: two runs' metrics (written by the job runtime), their summary, sparklines and the
PNG plot, checked by its pixels; and the command itself, run as a user would."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from slurmctl.observe.compare import COLOURS, compare_runs
from slurmctl.rundir import RunRegistry
from slurmctl.runtime import Runtime

REPO = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 640, 360  # write_png's defaults


def read_png(path: Path) -> list[list[tuple[int, int, int]]]:
    """A minimal decoder for 8-bit RGB, non-interlaced PNGs (the kind write_png makes); it
    undoes every filter type, so it does not depend on how the writer filtered its rows."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header = 8, b"", None
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert (depth, colour_type, interlace) == (8, 2, 0)
    raw, stride, rows, prev = zlib.decompress(idat), width * 3, [], bytearray(width * 3)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - 3] if i >= 3 else 0
            up, up_left = prev[i], prev[i - 3] if i >= 3 else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        rows.append([tuple(line[x * 3:x * 3 + 3]) for x in range(width)])
        prev = line
    return rows


@pytest.fixture
def two_runs(tmp_path):
    """Run A logs through the real job runtime; run B's metrics.jsonl is written with known times
    so its step rate can be checked exactly."""
    (tmp_path / "runs").mkdir()
    registry = RunRegistry(tmp_path / "runs")
    umask = os.umask(0o022)  # create() sets the CLI's umask; keep this test process's as it was
    try:
        a = registry.create(SimpleNamespace(name="cmp-a"))
        b = registry.create(SimpleNamespace(name="cmp-b"))
    finally:
        os.umask(umask)
    for run in (a, b):
        run.meta_path.write_text(json.dumps({"name": run.run_id.rsplit("-", 2)[0], "created": 1}))
    runtime = Runtime(run_dir=a.path)
    for step in range(50):  # falls from 2.0 to 0.5
        runtime.log(step, loss=2.0 - 1.5 * step / 49)
    with open(b.path / "metrics.jsonl", "w") as fh:  # 30 steps at 2 steps/s, from 2.5 to 1.5: always above A
        for step in range(30):
            fh.write(json.dumps({"step": step, "time": 1000.0 + step / 2, "loss": 2.5 - 1.0 * step / 29}) + "\n")
        fh.write("not json, a torn line\n")
    return registry, a, b


def test_summary_and_sparklines(two_runs, tmp_path):
    _, a, b = two_runs
    result = compare_runs(a, b)
    ra, rb = result["runs"]
    assert (ra["run_id"], ra["last_step"], ra["min_loss"]) == (a.run_id, 49, pytest.approx(0.5))
    assert ra["last_loss"] == pytest.approx(0.5) and ra["steps_per_second"] > 0
    assert (rb["last_step"], rb["last_loss"], rb["min_loss"]) == (29, pytest.approx(1.5), pytest.approx(1.5))
    assert rb["steps_per_second"] == 2.0
    spark_a, spark_b = result["sparklines"][a.run_id], result["sparklines"][b.run_id]
    assert len(spark_a) == 40 and len(spark_b) == 30  # long series sampled to 40 columns
    assert spark_a[0] == spark_b[0] == "█" and spark_a[-1] == spark_b[-1] == "▁"
    assert list(spark_b) == sorted(spark_b, reverse=True)  # a falling loss never draws a rising bar
    assert result["png"] is None


def near(image, colour, tolerance: int = 40) -> list[tuple[int, int]]:
    """Pixels within `tolerance` (per channel) of a line colour: the lines are antialiased."""
    return [(x, y) for y, row in enumerate(image) for x, px in enumerate(row)
            if all(abs(a - b) <= tolerance for a, b in zip(px, colour))]


def test_png_draws_both_runs_where_their_values_are(two_runs, tmp_path):
    _, a, b = two_runs
    result = compare_runs(a, b, png=tmp_path / "plot.png")
    image = read_png(Path(result["png"]))  # observe/charts.py: axes, labels, legend (tests/unit/test_charts.py)
    assert (len(image), len(image[0])) == (HEIGHT, WIDTH)
    line_a, line_b = near(image, COLOURS[0]), near(image, COLOURS[1])
    # Both runs are drawn as traces across the plot (plus their legend swatches); B (29 steps) ends
    # left of A (49 steps), and B (2.5 -> 1.5) stays above A (2.0 -> 0.5) where both are drawn.
    xs_a, xs_b = {x for x, _ in line_a}, {x for x, _ in line_b}
    assert len(xs_a) > WIDTH // 2 and len(xs_b) > WIDTH // 4
    shared = sorted(x for x in xs_a & xs_b if x < max(xs_b) - 60)[10:-10:25]  # away from the legend
    assert shared
    for x in shared:
        assert min(y for xx, y in line_b if xx == x) < max(y for xx, y in line_a if xx == x)


def test_compare_command_as_a_user_runs_it(two_runs, tmp_path):
    registry, a, b = two_runs
    site = yaml.safe_load((REPO / "deploy" / "local" / "site.yaml").read_text())
    site["runs_root"] = str(registry.runs_root)
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    env = {**os.environ, "SLURMCTL_SITE_CONFIG": str(tmp_path / "site.yaml")}
    png = tmp_path / "cmp.png"
    done = subprocess.run([sys.executable, "-m", "slurmctl.cli", "compare", a.run_id, b.run_id, "--png", str(png),
                           "--json"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [r["run_id"] for r in result["runs"]] == [a.run_id, b.run_id] and result["png"] == str(png)
    assert near(read_png(png), COLOURS[1])
    table = subprocess.run([sys.executable, "-m", "slurmctl.cli", "compare", "cmp-a", "cmp-b"],
                           capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert a.run_id in table.stdout and b.run_id in table.stdout and "▁" in table.stdout
    missing = subprocess.run([sys.executable, "-m", "slurmctl.cli", "compare", a.run_id, "no-such-run"],
                             capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr and "no-such-run" in missing.stderr
