"""Who may open a run: ``RunRegistry`` resolves names, ids and paths among the caller's runs only, after
an lstat check of every directory on the way (``check_owned_dir``)."""

from __future__ import annotations

import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path

from slurmctl.errors import ConfigError, RunNotFound, RunNotOwned, SlurmctlError
from slurmctl.rundir.layout import (
    CHECKPOINTS_DIR,
    LOGS_DIR,
    RUN_JSON,
    SAFE_PATH_RE,
    Run,
    current_user,
    is_run_id,
    new_run_id,
    user_of,
    user_runs_dir,
)


def check_owned_dir(path: Path, what: str, uid: int) -> os.stat_result:
    """lstat, never stat: a real directory, owned by `uid`, not writable by group or others."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise RunNotOwned(f"{what} {path} is a symbolic link; slurmctl does not follow it.",
                          "Run directories are real directories in your own runs directory; "
                          "ask the operator to fix it if you did not create the link.")
    if not stat.S_ISDIR(st.st_mode):
        raise RunNotOwned(f"{what} {path} is not a directory.", "Give a run id, a run name or a run directory.")
    if st.st_uid != uid:
        raise RunNotOwned(f"{what} {path} belongs to {user_of(st.st_uid)}, not to you ({user_of(uid)}).",
                          "slurmctl only acts on your own runs; `slurmctl ls` lists them.")
    if st.st_mode & 0o022:
        raise RunNotOwned(f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}), "
                          "so anyone could plant files in it.",
                          f"Remove the write bits (`chmod go-w {path}`) or ask the operator.")
    return st


# How many entries of another user's runs directory the operator's listing looks at: a user with
# 100,000 run directories makes root's `ls --all-users` slow only in what it shows of them (the rest
# are not listed), never for the other users. A user's own listing has no such bound.
OTHERS_DIR_ENTRIES = 5000
# How far a run dir's mtime may lag its run's `created` (a file server's clock behind this host's): recent()
# reads every run changed within this of the newest runs it lists.
MTIME_SLACK = 120.0


class RunRegistry:
    """The caller's runs: ``<runs_root>/<user>/<run id>``.

    ``root`` is the caller's own runs directory. The operator creates it (mode 0700, owned by the
    user); when it is missing and the caller may create it, it is created 0700.
    """

    def __init__(self, runs_root: Path, user: str | None = None, *, uid: int | None = None):
        self.runs_root = Path(runs_root).expanduser()
        self.user = user or current_user()
        self.uid = os.geteuid() if uid is None else uid
        self.root = user_runs_dir(self.runs_root, self.user)

    def path_of(self, name: str) -> Path:
        """``<runs_root>/<user>/<name>``: where the caller's run (or sweep) `name` is or will be; `name`
        may be sbatch's pattern of one (a sweep element's id with %a)."""
        return self.root / name

    # --- the caller's runs directory -------------------------------------------------------------
    def user_dir(self, create: bool = False) -> Path | None:
        """The caller's verified runs directory; None when it does not exist (and not `create`)."""
        try:
            check_owned_dir(self.root, "your runs directory", self.uid)
            return self.root
        except FileNotFoundError:
            if not create:
                return None
        except PermissionError:
            raise ConfigError(f"the runs root {self.runs_root} cannot be read by you.",
                              "Ask the operator: the runs root must be 0755 with a private 0700 directory "
                              "per user.") from None
        try:
            self.root.mkdir(mode=0o700)
        except FileExistsError:
            pass  # created meanwhile: verified below
        except OSError as exc:
            raise ConfigError(
                f"your runs directory {self.root} does not exist and cannot be created ({exc.strerror}).",
                f"Ask the operator to create it: `install -d -m 0700 -o {self.user} {self.root}` "
                "(deploy/local/up does this for the local cluster's users).") from None
        check_owned_dir(self.root, "your runs directory", self.uid)
        return self.root

    def create(self, spec, share_with_group: bool = False, run_id: str | None = None) -> Run:
        """A fresh run dir: 0700, or 0750 when the site shares runs with a team group (the group is
        the user dir's, inherited through its setgid bit, which the operator sets). `run_id`: a
        sweep element's id (``sweep_element_id``); an existing directory raises FileExistsError."""
        if not SAFE_PATH_RE.fullmatch(str(self.root)):
            raise ConfigError(
                f"runs_root {self.runs_root} contains characters (spaces, quotes, ...) that #SBATCH lines "
                "cannot carry.",
                "Set runs_root in site.yaml to a path of letters, digits, '/', '.', '_' or '-'.",
            )
        os.umask(0o027 if share_with_group else 0o077)  # every file the CLI writes into the run
        self.user_dir(create=True)
        run_id = run_id or new_run_id(spec.name)
        if not is_run_id(run_id):
            raise ValueError(f"not a run id: {run_id!r}")
        path = self.path_of(run_id)
        mode = 0o750 if share_with_group else 0o700
        path.mkdir(mode=mode)
        (path / LOGS_DIR).mkdir(mode=mode)
        (path / CHECKPOINTS_DIR).mkdir(mode=mode)
        return Run(run_id, path)

    # --- lookups: only the caller's runs -------------------------------------------------------
    def _entries(self, directory: Path) -> list[os.DirEntry]:
        """The directory's entries; for a reader who is not its owner, the first OTHERS_DIR_ENTRIES."""
        try:
            with os.scandir(directory) as it:
                if self.uid == os.geteuid():
                    return list(it)
                return [entry for entry, _ in zip(it, range(OTHERS_DIR_ENTRIES))]
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return []

    def owned_entries(self, directory: Path, name: re.Pattern) -> list[os.DirEntry]:
        """The registry user's real directories under `directory` whose names match `name` (a
        bounded scan for a reader who is not their owner, as every listing here)."""
        return self._owned_dirs([e for e in self._entries(directory) if name.fullmatch(e.name)], self.uid)

    @staticmethod
    def _owned_dirs(entries, uid: int | None) -> list[os.DirEntry]:
        """Real directories owned by `uid` (symlinks, files and anything not the owner's are no runs)."""
        found = []
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and (uid is None or st.st_uid == uid):
                found.append(entry)
        return found

    @staticmethod
    def _newest(entries: list[os.DirEntry], limit: int | None) -> list[os.DirEntry]:
        """The `limit` most recently changed of one day's run dirs (or of the undated ones): only
        their run.json is read, however many runs a user made that day."""
        if limit is None or len(entries) <= limit:
            return entries
        return sorted(entries, key=lambda e: e.stat(follow_symlinks=False).st_mtime)[-limit:]

    @staticmethod
    def _newest_created(entries: list[os.DirEntry], limit: int | None) -> list[os.DirEntry]:
        """The run dirs among `entries` that may be the `limit` newest by creation, without reading every
        run.json: a run dir's mtime is never older than its run's `created` (run.json is written into it
        after `created` is taken, and mtimes only grow), so dirs are read newest-changed first, and once
        one changed more than MTIME_SLACK before the `limit`-th newest creation read so far, no dir
        after it can be newer. The slack absorbs a file server's clock running behind this host's."""
        if limit is None or len(entries) <= limit:
            return entries

        def changed(entry: os.DirEntry) -> float:
            try:
                return entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                return float("inf")  # read it: no mtime says it is old

        chosen: list[os.DirEntry] = []
        newest: list[float] = []  # the `limit` newest creations read so far, ascending
        for entry in sorted(entries, key=changed, reverse=True):
            if len(newest) >= limit and changed(entry) + MTIME_SLACK < newest[0]:
                break
            chosen.append(entry)
            created = Run(entry.name, Path(entry.path)).meta.get("created")
            newest = sorted([*newest, created if isinstance(created, int | float) else 0.0])[-limit:]
        return chosen

    def _sorted_runs(self, entries) -> list[Run]:
        # a reader who is not the runs' owner (root) reads each of them through its directory's fd,
        # the owner checked there (Run.owner): a run dir swapped for a symlink shows nothing
        owner = self.uid if self.uid != os.geteuid() else None
        runs = [Run(e.name, Path(e.path), owner=owner) for e in entries
                if os.path.isfile(os.path.join(e.path, RUN_JSON))]
        return sorted(runs, key=lambda r: (r.meta.get("created") or 0, r.run_id))

    def _runs_in(self, directory: Path, uid: int | None) -> list[Run]:
        return self._sorted_runs(self._owned_dirs(self._entries(directory), uid))

    def list(self) -> list[Run]:
        directory = self.user_dir()
        return self._runs_in(directory, self.uid) if directory else []

    def recent(self, limit: int | None = None, since: float | None = None) -> list[Run]:
        """``list()`` cut to runs created at or after `since` (Unix time) and then to the newest
        `limit`, oldest first, at a cost that does not grow with older runs: a run id ends with its
        creation day (UTC), so only the newest days' directories are stat'ed and their run.json read
        (one day more than needed, for a run created just after midnight of its id's day), plus the
        rare directory whose name is no run id."""
        directory = self.user_dir()
        if directory is None:
            return []
        by_day: dict[str, list[os.DirEntry]] = {}
        undated: list[os.DirEntry] = []
        for entry in self._entries(directory):
            if is_run_id(entry.name):  # <name>-YYYYMMDD-xxxx
                by_day.setdefault(entry.name[-13:-5], []).append(entry)
            else:
                undated.append(entry)
        first_day = "" if since is None else f"{datetime.fromtimestamp(since, UTC):%Y%m%d}"
        # The owner reads every run.json of the days it needs (exact order by creation); a reader who is
        # not the owner (root) reads only each day's `limit` most recently changed dirs, so one user's
        # 100,000 dirs of one day cost everyone else a bounded read.
        bound = (lambda entries: entries) if self.uid == os.geteuid() else (lambda e: self._newest(e, limit))
        chosen, found, extra_days = bound(self._owned_dirs(undated, self.uid)), 0, 1
        for day in sorted(by_day, reverse=True):
            if day < first_day or (limit is not None and found >= limit):
                if extra_days == 0:
                    break
                extra_days -= 1
            owned = bound(self._owned_dirs(by_day[day], self.uid))
            runs_of_day = [e for e in owned if os.path.isfile(os.path.join(e.path, RUN_JSON))]
            chosen += runs_of_day
            found += len(runs_of_day)
        if self.uid == os.geteuid():
            chosen = self._newest_created(chosen, limit)
        runs = self._sorted_runs(chosen)
        if since is not None:
            runs = [r for r in runs if (r.meta.get("created") or 0) >= since]
        return runs[-limit:] if limit else runs

    def list_all_users(self, limit: int | None = None, since: float | None = None) -> list[tuple[str, Run]]:
        """(user, run) for every user's runs, newest `limit` of all: the operator's read-only view
        (root only). Each user's runs are found as that user's own `recent(limit, since)` would,
        bounded per user (OTHERS_DIR_ENTRIES), so one user's many directories slow no one else."""
        if os.geteuid() != 0:
            raise RunNotOwned("only the operator (root) can list every user's runs.",
                              "Drop --all-users to list your own runs.")
        found = []
        try:
            users = sorted(os.scandir(self.runs_root), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        for entry in users:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):  # a symlinked user dir is skipped, never followed
                continue
            try:
                runs = RunRegistry(self.runs_root, entry.name, uid=st.st_uid).recent(limit, since)
            except SlurmctlError:
                continue  # not a runs directory slurmctl trusts (group-writable, ...): nothing of it is listed
            found += [(entry.name, run) for run in runs]
        found.sort(key=lambda ur: (ur[1].meta.get("created") or 0, ur[1].run_id))
        return found[-limit:] if limit else found

    def get(self, ref: str) -> Run:
        """One of the caller's runs by id, unique id prefix, name (its newest run) or run dir path.

        A path is accepted only when it is a real directory owned by the caller; a name or id is
        only ever looked up in the caller's own runs directory.
        """
        if "/" in ref or ref in {".", ".."}:
            return self._get_path(Path(ref).expanduser())
        directory = self.user_dir()
        if directory is None:
            raise RunNotFound(f"you have no runs yet ({self.root} does not exist).",
                              "Submit one with `slurmctl submit run.yaml`.")
        candidate = directory / ref
        if os.path.lexists(candidate):
            check_owned_dir(candidate, "run directory", self.uid)
            if (candidate / RUN_JSON).is_file():
                return Run(ref, candidate)
        runs = self._runs_in(directory, self.uid)
        by_name = [r for r in runs if r.meta.get("name") == ref]
        if by_name:
            return by_name[-1]
        prefixed = [r for r in runs if r.run_id.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if len(prefixed) > 1:
            names = ", ".join(r.run_id for r in prefixed[:5])
            raise RunNotFound(f"'{ref}' matches several runs: {names}.", "Give more of the run id.")
        raise RunNotFound(f"no run '{ref}' among your runs in {self.root}.", "`slurmctl ls` lists your runs.")

    def _get_path(self, path: Path) -> Run:
        try:
            check_owned_dir(path, "run directory", self.uid)
        except FileNotFoundError:
            raise RunNotFound(f"no run directory at {path}.", "`slurmctl ls` lists your runs.") from None
        except PermissionError:  # inside another user's private runs directory
            raise RunNotOwned(f"run directory {path} is not yours (you cannot even look into it).",
                              "slurmctl only acts on your own runs; `slurmctl ls` lists them.") from None
        if not (path / RUN_JSON).is_file():
            raise RunNotFound(f"{path} is not a run directory (it has no {RUN_JSON}).",
                              "Give a run id, a run name or a run directory.")
        return Run(path.name, Path(os.path.abspath(path)))
