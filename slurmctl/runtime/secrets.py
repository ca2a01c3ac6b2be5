"""Read named secrets from a 0600 KEY=VALUE file and print shell `export` lines.

The batch script evals the output at job start, so secret values exist only in the job's
environment: never in the sbatch script, `scontrol show job`, or the logs.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

from slurmctl.errors import PreflightError


def parse_secrets_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; '#' comments, blank lines and an optional `export ` prefix allowed."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        if not sep or not key.strip().isidentifier():
            raise PreflightError(f"{path} line {number} is not KEY=VALUE.",
                                 "Write one KEY=VALUE per line (no value is ever printed).")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def check_secrets_file(path: Path, keys: list[str]) -> dict[str, str]:
    """The file must exist, belong to us, be readable by nobody else, and hold every key."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise PreflightError(f"secrets file {path} does not exist but run.yaml asks for {', '.join(keys)}.",
                             f"Create it with one KEY=VALUE per line and `chmod 600 {path}`.") from None
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise PreflightError(f"secrets file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}).",
                             f"Run `chmod 600 {path}`.")
    if st.st_uid != os.getuid():
        raise PreflightError(f"secrets file {path} belongs to another user.", "Use a file you own.")
    values = parse_secrets_file(path)
    missing = [k for k in keys if k not in values]
    if missing:
        raise PreflightError(f"secrets file {path} has no {', '.join(missing)}.",
                             f"Add {' and '.join(k + '=...' for k in missing)} to it.")
    return {k: values[k] for k in keys}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m slurmctl.runtime.secrets FILE KEY...", file=sys.stderr)
        return 2
    path, keys = Path(os.path.expanduser(argv[0])), argv[1:]
    try:
        values = check_secrets_file(path, keys)
    except PreflightError as exc:
        print(f"slurmctl: {exc.message} {exc.hint}", file=sys.stderr)
        return 78
    for key, value in values.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
