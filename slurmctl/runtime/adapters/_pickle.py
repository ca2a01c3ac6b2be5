"""Read plain values (ints, strings) out of a torch.save archive without torch and without running
any of its code: a restricted unpickler whose every class is an inert stand-in and whose tensors
(persistent ids) are None. A file that is no complete zip archive is no checkpoint."""

from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path

MAX_PICKLE_BYTES = 64 * 1024 * 1024


class _Inert:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        return _Inert

    def persistent_load(self, pid):
        return None


def torch_archive_dict(path: Path) -> dict | None:
    """The top-level dict of a torch.save zip archive (tensors as None); None when the file is not a
    complete archive (a save cut short leaves no central directory) or its pickle is not a dict."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not names or archive.getinfo(names[0]).file_size > MAX_PICKLE_BYTES:
                return None
            data = _Unpickler(archive.open(names[0])).load()
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            KeyError, IndexError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
