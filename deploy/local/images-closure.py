"""Print the files (relative to site-packages) of the named distributions and everything they need.

Used by images-up to copy just torch + numpy + their dependencies out of the venv into the base
image, instead of the whole venv (pip, test tools, ...). Requirements behind an `extra ==` marker
are skipped; other markers are assumed true (this is Linux, CPython 3.11).
"""

import re
import sys
from importlib import metadata


def closure(names: list[str]) -> list[metadata.Distribution]:
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # optional platform dependency that is not installed here
        seen[name] = dist
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            todo.append(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
    return list(seen.values())


if __name__ == "__main__":
    for dist in closure(sys.argv[1:]):
        for path in dist.files or []:
            if not str(path).startswith(".."):  # skip console scripts in bin/
                print(path)
