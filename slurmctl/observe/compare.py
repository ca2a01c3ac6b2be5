"""Compare two runs from their metrics.jsonl: a table, terminal sparklines and a PNG plot.

The PNG is drawn with the standard library (zlib + struct): a two-line chart needs no plotting
stack, and matplotlib is not in the environment (it would add ~40 MB to every login node).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.fsutil import read_jsonl
from slurmctl.rundir import Run

SPARK = "▁▂▃▄▅▆▇█"
COLOURS = [(31, 119, 180), (255, 127, 14)]


@dataclass
class RunSeries:
    run_id: str
    steps: list[int]
    losses: list[float]
    last_step: int | None
    last_loss: float | None
    min_loss: float | None
    steps_per_second: float | None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("steps"), d.pop("losses")
        return d


def load_series(run: Run, metric: str = "loss") -> RunSeries:
    steps, values = [], []
    for record in read_jsonl(run.metrics_path):  # capped; a FIFO or device there reads as empty
        if isinstance(record.get(metric), (int, float)) and isinstance(record.get("step"), int):
            steps.append(record["step"])
            values.append(float(record[metric]))
    rate = run.step_rate()  # the same steps/s as `slurmctl status` and the exporter
    rate = round(rate, 3) if rate is not None else None
    finite = [v for v in values if v == v]
    return RunSeries(run.run_id, steps, values, steps[-1] if steps else None, values[-1] if values else None,
                     min(finite) if finite else None, rate)


def sparkline(values: list[float], width: int = 40) -> str:
    finite = [v for v in values if v == v]
    if not finite:
        return ""
    if len(values) > width:  # sample evenly so the line keeps its shape
        values = [values[int(i * len(values) / width)] for i in range(width)]
    lo, hi = min(finite), max(finite)
    span = (hi - lo) or 1.0
    return "".join(SPARK[int((v - lo) / span * (len(SPARK) - 1))] if v == v else " " for v in values)


def write_png(path: Path, series: list[RunSeries], width: int = 640, height: int = 360) -> Path:
    """Loss against step for each run, coloured lines on white with a grey frame."""
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    margin = 20
    all_steps = [s for ser in series for s in ser.steps]
    all_vals = [v for ser in series for v in ser.losses if v == v]
    for x in range(margin, width - margin):
        pixels[margin][x] = pixels[height - margin][x] = (160, 160, 160)
    for y in range(margin, height - margin + 1):
        pixels[y][margin] = pixels[y][width - margin - 1] = (160, 160, 160)
    if all_steps and all_vals:
        x0, x1 = min(all_steps), max(all_steps) or 1
        y0, y1 = min(all_vals), max(all_vals)

        def to_px(step: int, value: float) -> tuple[int, int]:
            px = margin + int((step - x0) / ((x1 - x0) or 1) * (width - 2 * margin - 1))
            py = height - margin - int((value - y0) / ((y1 - y0) or 1) * (height - 2 * margin))
            return px, py

        for colour, ser in zip(COLOURS, series):
            points = [to_px(s, v) for s, v in zip(ser.steps, ser.losses) if v == v]
            for (ax, ay), (bx, by) in zip(points, points[1:] or points):
                n = max(abs(bx - ax), abs(by - ay), 1)
                for i in range(n + 1):
                    x, y = ax + (bx - ax) * i // n, ay + (by - ay) * i // n
                    for dy in (0, 1):
                        if 0 <= y + dy < height and 0 <= x < width:
                            pixels[y + dy][x] = colour
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    path.write_bytes(png)
    return path


def compare_runs(a: Run, b: Run, png: Path | None = None, metric: str = "loss") -> dict:
    series = [load_series(a, metric), load_series(b, metric)]
    result = {"metric": metric, "runs": [s.to_dict() for s in series],
              "sparklines": {s.run_id: sparkline(s.losses) for s in series}, "png": None}
    if png is not None:
        result["png"] = str(write_png(png, series))
    return result
