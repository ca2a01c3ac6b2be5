"""site.yaml and run.yaml as the read path sees them: validated by config.models, read without pydantic.

config/models.py owns both formats (every key, default, coercion and rule). A read command (ls, status)
needs a few of their values: runs_root, a partition's price, the discounts, a run's GPUs and restarts.
Importing pydantic and building the models costs ~100 ms, more than the Slurm query of the command.
So a file is validated by its model the first time it is read, and what the model made of it is
kept in the user's private cache (slurmctl.usercache) under the hash of the file's bytes and of
the model code; later reads of the same bytes load that JSON. A changed file, or changed model
code, misses the cache and is validated again, with the model's errors.

A ``View`` answers attribute access as the model does: the model's fields (defaults filled in,
values coerced) and its properties as they evaluated at validation.
"""

from __future__ import annotations

import hashlib
import os
from datetime import time
from pathlib import Path

from slurmctl import __version__, usercache
from slurmctl.config.locate import find_site_config
from slurmctl.config.pricing import Discounts
from slurmctl.fsutil import read_capped

# Entries kept per kind: one per distinct run.yaml read, so the cache stays small.
_KEEP = {"site": 16, "run": 2000}
# The modules whose code decides what a file validates to: a change to any of them misses the cache.
_MODEL_CODE = ("config/models.py", "config/pricing.py", "durations.py", "safe_yaml.py")
_DATACLASSES = {"Discounts": Discounts}


class View:
    """Read-only attribute access to a validated model's values."""

    __slots__ = ("_values",)

    def __init__(self, values: dict):
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name: str):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        return f"View({self._values!r})"


def _model_fingerprint() -> str:
    package = Path(__file__).resolve().parent.parent
    parts = [__version__]
    for name in _MODEL_CODE:
        try:
            info = os.stat(package / name)
            parts.append(f"{name}:{info.st_mtime_ns}:{info.st_size}")
        except OSError:
            parts.append(f"{name}:-")
    return "|".join(parts)


def _key(kind: str, raw: bytes) -> str:
    digest = hashlib.sha256(_model_fingerprint().encode() + b"\0" + raw).hexdigest()[:40]
    return f"{kind}-{digest}.json"


# --- the snapshot: a validated model as JSON, and back -----------------------------------------
def _encode(value):
    """JSON for a validated value; TypeError for anything a View could not give back as it was."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return {"~path": str(value)}
    if isinstance(value, time):
        return {"~time": value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("mapping with keys that are not strings")
        return {"~dict": {k: _encode(v) for k, v in value.items()}}
    cls = type(value)
    if _DATACLASSES.get(cls.__name__) is cls:
        return {"~dataclass": cls.__name__, "fields": {k: _encode(v) for k, v in vars(value).items()}}
    if hasattr(cls, "model_fields"):  # a pydantic model: its fields, then its properties
        values = {name: _encode(getattr(value, name)) for name in cls.model_fields}
        for klass in cls.__mro__:
            for name, attr in vars(klass).items():
                if isinstance(attr, property) and name not in values and not name.startswith("_"):
                    try:
                        values[name] = _encode(getattr(value, name))
                    except (TypeError, ValueError, AttributeError):
                        pass  # a property that does not evaluate is simply absent from the view
        return {"~model": values}
    raise TypeError(f"cannot keep a {cls.__name__} in the cache")


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "~model" in value:
        return View({k: _decode(v) for k, v in value["~model"].items()})
    if "~dict" in value:
        return {k: _decode(v) for k, v in value["~dict"].items()}
    if "~path" in value:
        return Path(value["~path"])
    if "~time" in value:
        return time.fromisoformat(value["~time"])
    if "~dataclass" in value:
        return _DATACLASSES[value["~dataclass"]](**{k: _decode(v) for k, v in value["fields"].items()})
    raise ValueError("not a snapshot")


def _cached(name: str) -> View | None:
    entry = usercache.read_entry(name)
    if entry is None or "snapshot" not in entry:
        return None
    try:
        view = _decode(entry["snapshot"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # damaged: validated again below
    return view if isinstance(view, View) else None


def _remember(kind: str, name: str, model) -> None:
    try:
        snapshot = _encode(model)
    except TypeError:
        return
    if usercache.write_entry(name, {"snapshot": snapshot}):
        usercache.prune(f"{kind}-", _KEEP[kind])


def _read_site(path: Path) -> bytes:
    """site.yaml's bytes, or b"" when it cannot be read: ``load_site_config`` then words the problem
    (missing, a FIFO, permissions, too large). Capped at fsutil's default (1 MiB, not below
    safe_yaml's limit, whose module imports yaml): a hit needs bytes that validated before."""
    try:
        return read_capped(path, nofollow=False)
    except OSError:
        return b""


# --- the two files --------------------------------------------------------------------------
def site_view(path: Path | None = None):
    """site.yaml's validated values (SiteConfig's fields and properties); ConfigError as
    ``load_site_config`` raises it when the file is invalid."""
    path = path or find_site_config()
    raw = _read_site(path)
    name = _key("site", raw) if raw else None
    view = _cached(name) if name else None
    if view is not None:
        return view
    from slurmctl.config.models import load_site_config  # why: pydantic only when the cache misses

    model = load_site_config(path)
    if name and _read_site(path) == raw:  # the bytes that were validated
        _remember("site", name, model)
    return model


def run_spec_view(run):
    """A run's frozen run.yaml as RunSpec validates it (``Run.spec()``), from the cache when the
    same bytes were validated before; raises as ``Run.spec()`` does."""
    raw = read_capped(run.spec_path)
    name = _key("run", raw)
    view = _cached(name)
    if view is not None:
        return view
    from slurmctl.config.models import RunSpec  # why: pydantic and yaml only when the cache misses
    from slurmctl.safe_yaml import bounded_safe_load  # why: yaml only when the cache misses

    model = RunSpec.model_validate(bounded_safe_load(raw.decode(errors="replace")))
    _remember("run", name, model)
    return model
