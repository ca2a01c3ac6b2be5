"""The per-user node cache of object-store datasets (run.yaml `data: [{src: ...}]`), and the training's
reader of a run's datasets (`open_dataset`).

The staging job step that fills the cache before the training starts is slurmctl/runtime/datastage.py;
the training then opens the dataset at its stable per-run view path ($SLURMCTL_DATA_<NAME>), or reads
the store itself for `cache: none`.

Layout under a cache root (site.yaml data.node_cache_dir on every node, or data.shared_cache_dir):
  <root>/                         root's, 0755: no user makes anything in it
  <root>/usage/<user>             root's measure of the bytes each user's entries hold on disk, made by
                                  the prolog at every job start (slurmctl/ops/hooks/datacache.py)
  <root>/<user>/                  0700, made for the user by the prolog: nobody else reads or plants here
      objects/<id>                one object, 0400; <id> = sha256 of (url, etag/generation, size)
      objects/<id>.json           its record: url, etag, size, md5, when staged and last used
      locks/<id>.lock             flock held while one job stages it (a second job waits, then reuses)
      leases/<job id>.json        the entries a job holds; eviction never removes a live job's entries
      views/<run id>/<name>       the run's dataset: a symlink to .<name>-<content hash>/, a directory
                                  of one symlink per object, named by its key

An entry is used only when it is a regular file owned by the user, not writable by anyone else, of
the size the store lists, and (site.yaml data.verify_on_reuse, the default) its MD5 still equals the
digest recorded when it was staged and the store's own MD5 where the store gives one; anything else is
removed and staged again, never read. Eviction: least recently used entries of the user, none a live
job holds, until the user's own entries and staging temporaries (counted live) plus the other users'
(as root last measured them, each counted up to site.yaml data.user_cache_share of the budget) fit the
budget. A staging temporary (objects/.staging-<id>-*) whose entry lock nobody holds was left by a job
that ended mid-download: the next staging removes it.

The cache itself is standard library; the object store is reached through fsspec (s3fs for s3://,
gcsfs for gs://), imported only when a dataset's objects are listed (staged, or read with `cache: none`).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from slurmctl import rundir
from slurmctl.fsutil import human_bytes, read_json, write_atomic

CHUNK = 8 * 1024 * 1024
# A key that is not a plain relative path (a '..', an empty part, a control character) cannot name a
# file of the view: such objects are skipped and counted.
_BAD_PART = {"", ".", ".."}
USAGE_DIR = "usage"
STAGING_PREFIX = ".staging-"  # a download in progress, in objects/: .staging-<entry id>-<random>
# A temporary without an entry id in its name (older versions) is removed once this old.
STALE_UNNAMED_STAGING = 24 * 3600


@dataclass(frozen=True)
class RemoteObject:
    """One object as the store lists it: its identity is (url, version, size)."""

    url: str  # s3://bucket/key
    relative: str  # the key below the dataset's prefix: the file name in the run's view
    size: int
    version: str  # S3 ETag or GCS generation
    md5: str | None  # hex MD5 of the bytes when the store states it (single-part ETag, GCS md5Hash)

    @property
    def entry_id(self) -> str:
        return hashlib.sha256(f"{self.url}\0{self.version}\0{self.size}".encode()).hexdigest()[:40]


class CacheError(Exception):
    """A dataset cannot be staged; the message says why (and what to do, unless `fix` says it apart).
    `kind` names the cause for the run's record (datastage.py): budget, cache (the cache directory),
    empty (no objects)."""

    def __init__(self, message: str, kind: str = "cache", fix: str = ""):
        super().__init__(message)
        self.kind, self.fix = kind, fix


def describe(info: dict, url: str, relative: str) -> RemoteObject:
    """fsspec's listing of one object (s3fs: ETag; gcsfs: generation + md5Hash) -> RemoteObject."""
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    generation = str(info.get("generation") or "")
    md5 = None
    if info.get("md5Hash"):
        md5 = base64.b64decode(info["md5Hash"]).hex()
    elif etag and "-" not in etag and len(etag) == 32:  # a single-part S3 upload: the ETag is the MD5
        md5 = etag.lower()
    return RemoteObject(url=url, relative=relative, size=int(info.get("size") or 0),
                        version=generation or etag, md5=md5)


def _file_md5(fd: int) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def safe_relative(relative: str) -> bool:
    parts = relative.split("/")
    return all(p not in _BAD_PART for p in parts) and not any(ord(c) < 32 or c == "\x7f" for c in relative)


class UserCache:
    """One user's entries under a cache root (the calling process's user: a job stages as its owner)."""

    def __init__(self, root: Path, budget_bytes: int, verify: bool = True,
                 budget_setting: str = "data.node_cache_budget", user_share: float = 1.0):
        self.root = Path(root)
        # another user's bytes count against this user's room only up to this share of the budget: one
        # user over it (a big dataset, or anything written into their own directory) takes room from
        # nobody else; their own next staging evicts their own entries back within the budget
        self.user_share = min(max(float(user_share), 0.0), 1.0)
        self.uid = os.geteuid()
        self.user = pwd.getpwuid(self.uid).pw_name
        self.budget = budget_bytes
        self.budget_setting = budget_setting  # the site.yaml key a message names
        self.verify = verify
        self.dir = self.root / self.user

    # --- directories ---------------------------------------------------------------------------------
    def open(self) -> UserCache:
        """Check the user's 0700 directory (made by the prolog). Where the root still lets users write
        (an older node, mode 1777), the user makes it; one another user made under our name is refused."""
        try:
            root = os.stat(self.root)
        except OSError as exc:
            raise CacheError(f"the cache directory {self.root} is missing on this node ({exc.strerror}); the operator "
                             "makes it, root's, mode 0755, where site.yaml data.node_cache_dir says") from None
        if root.st_mode & 0o002 and not root.st_mode & stat.S_ISVTX:
            # world-writable without the sticky bit: anyone could rename a user's directory away
            raise CacheError(f"the cache directory {self.root} is writable by everyone without the sticky bit; "
                             "the operator must make it root's, mode 0755")
        try:
            os.mkdir(self.dir, 0o700)
        except FileExistsError:
            pass
        except PermissionError:
            raise CacheError(f"{self.dir} is missing: the node's prolog makes it at job start (site.yaml data "
                             "names this cache, and the prolog is slurmctl's); ask the operator to check the "
                             "hooks log of this node") from None
        info = os.lstat(self.dir)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != self.uid or info.st_mode & 0o077:
            raise CacheError(f"{self.dir} is not a private directory of {self.user} (owner uid {info.st_uid}, mode "
                             f"{stat.S_IMODE(info.st_mode):o}); nothing is cached or read there. The next job's "
                             "prolog on this node replaces it; or ask the operator to remove it")
        for sub in ("objects", "locks", "leases", "views"):
            (self.dir / sub).mkdir(mode=0o700, exist_ok=True)
        return self

    def object_path(self, entry_id: str) -> Path:
        return self.dir / "objects" / entry_id

    def record_path(self, entry_id: str) -> Path:
        return self.dir / "objects" / f"{entry_id}.json"

    # --- one entry -----------------------------------------------------------------------------------
    def check(self, obj: RemoteObject) -> bool | None:
        """True: a good entry (its last use is now). None: no entry. False: a bad one, removed."""
        path, record = self.object_path(obj.entry_id), read_json(self.record_path(obj.entry_id))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:  # a symlink (ELOOP) or something unopenable in our own directory: remove it
            self.remove(obj.entry_id)
            return False
        try:
            info = os.fstat(fd)
            good = (stat.S_ISREG(info.st_mode) and info.st_uid == self.uid and not info.st_mode & 0o022
                    and isinstance(record, dict) and record.get("url") == obj.url
                    and record.get("size") == obj.size == info.st_size and record.get("version") == obj.version)
            if good and self.verify:
                actual = _file_md5(fd)
                good = actual == record.get("md5") and (obj.md5 is None or actual == obj.md5)
        finally:
            os.close(fd)
        if not good:
            self.remove(obj.entry_id)
            return False
        record["last_used"] = time.time()
        write_atomic(self.record_path(obj.entry_id), json.dumps(record))
        return True

    def remove(self, entry_id: str) -> None:
        """Remove an entry and its record, whatever stands under their names in our own directory (a
        directory made in place of an entry included: it is never read, and it must not block re-staging)."""
        for path in (self.object_path(entry_id), self.record_path(entry_id)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                shutil.rmtree(path, ignore_errors=True)  # rmtree never follows a symlink inside it

    def store(self, obj: RemoteObject, fs, remote_path: str) -> None:
        """Download into a temporary file, hashing as it goes; keep it only if size and MD5 match."""
        objects = self.dir / "objects"
        # named after its entry: a later stager knows it abandoned (a cancelled or preempted job) when
        # nobody holds the entry's lock, and removes it (clean_staging)
        fd, tmp = tempfile.mkstemp(dir=objects, prefix=f"{STAGING_PREFIX}{obj.entry_id}-")
        try:
            digest = hashlib.md5(usedforsecurity=False)
            size = 0
            with os.fdopen(fd, "wb") as out, fs.open(remote_path, "rb", block_size=CHUNK) as src:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            md5 = digest.hexdigest()
            if size != obj.size or (obj.md5 is not None and md5 != obj.md5):
                raise CacheError(f"{obj.url} arrived as {size} bytes with MD5 {md5}; the store lists {obj.size} "
                                 f"bytes, MD5 {obj.md5}. It changed while being read, or the transfer is broken; "
                                 "run the job again")
            os.chmod(tmp, 0o400)
            os.replace(tmp, self.object_path(obj.entry_id))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        now = time.time()
        write_atomic(self.record_path(obj.entry_id), json.dumps({
            "url": obj.url, "version": obj.version, "size": obj.size, "md5": md5, "staged": now, "last_used": now}))

    @contextlib.contextmanager
    def locked(self, entry_id: str):
        """One stager per entry on this cache: a second job waits here, then finds the entry made."""
        fd = os.open(self.dir / "locks" / f"{entry_id}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def clean_staging(self) -> tuple[int, int]:
        """Remove the staging temporaries an ended stager left (a job cancelled, preempted or timed out in
        the middle of a download): those whose entry's lock nobody holds now. Returns (files, bytes)."""
        removed = freed = 0
        temporaries = []
        with contextlib.suppress(OSError), os.scandir(self.dir / "objects") as listing:
            temporaries = [e for e in listing if e.name.startswith(STAGING_PREFIX)]
        for entry in temporaries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            entry_id = entry.name[len(STAGING_PREFIX):].split("-", 1)[0]
            if len(entry_id) == 40 and entry_id.isalnum():
                if not self._lock_free(entry_id):
                    continue  # a live stager is writing it
            elif time.time() - info.st_mtime < STALE_UNNAMED_STAGING:
                continue
            try:
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue
            removed += 1
            freed += info.st_blocks * 512 if stat.S_ISREG(info.st_mode) else 0
        return removed, freed

    def _lock_free(self, entry_id: str) -> bool:
        try:
            fd = os.open(self.dir / "locks" / f"{entry_id}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)  # closing drops the lock we may have taken

    def staging_bytes(self) -> int:
        """Bytes on disk of the staging temporaries now in objects/ (live ones: they count as ours)."""
        total = 0
        with contextlib.suppress(OSError), os.scandir(self.dir / "objects") as listing:
            for entry in listing:
                if entry.name.startswith(STAGING_PREFIX):
                    with contextlib.suppress(OSError):
                        info = entry.stat(follow_symlinks=False)
                        total += info.st_blocks * 512 if stat.S_ISREG(info.st_mode) else 0
        return total

    # --- leases and eviction -------------------------------------------------------------------------
    def hold(self, job_id: str, entry_ids: list[str]) -> None:
        """Record (adding to what this job already holds) that `job_id` uses these entries."""
        path = self.dir / "leases" / f"{job_id}.json"
        held = set((read_json(path) or {}).get("entries", []))
        write_atomic(path, json.dumps({"job_id": job_id, "time": time.time(),
                                       "entries": sorted(held | set(entry_ids))}))

    def held(self, current_job: str | None) -> set[str]:
        """Entries of live jobs' leases; the leases of ended jobs are removed."""
        out: set[str] = set()
        for path in (self.dir / "leases").glob("*.json"):
            lease = read_json(path) or {}
            job_id = path.stem
            if job_id == current_job or job_alive(job_id):
                out.update(lease.get("entries", []))
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return out

    def entries(self) -> list[dict]:
        out = []
        for path in (self.dir / "objects").glob("*.json"):
            record = read_json(path)
            if isinstance(record, dict) and (self.dir / "objects" / path.stem).exists():
                out.append({**record, "id": path.stem})
        return out

    def used_bytes(self) -> int:
        return sum(int(e.get("size") or 0) for e in self.entries())

    def others_bytes(self) -> int:
        """What the other users' entries on this cache hold, as root last measured them (usage/, root's,
        written by the prolog), each user counted up to `user_share` of the budget. A file any user could
        have written counts for nothing."""
        try:
            usage_fd = os.open(self.root / USAGE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return 0
        total = 0
        try:
            st = os.fstat(usage_fd)
            if st.st_uid != 0 or st.st_mode & 0o022:
                return 0
            with os.scandir(usage_fd) as entries:
                names = [e.name for _, e in zip(range(10_000), entries) if not e.name.startswith(".")]
            share = int(self.user_share * self.budget)
            for name in names:
                if name == self.user:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=usage_fd)
                    try:
                        st = os.fstat(fd)
                        if stat.S_ISREG(st.st_mode) and st.st_uid == 0:
                            measured = int((os.read(fd, 64).decode().split() or [0])[0])
                            total += min(max(measured, 0), share)
                    finally:
                        os.close(fd)
        finally:
            os.close(usage_fd)
        return total

    def make_room(self, need: int, keep: set[str], current_job: str | None) -> tuple[int, int]:
        """Evict the least recently used entries nobody holds until `need` more bytes fit the budget.
        Whether they can fit is decided first: when even every evictable entry gone would not make room,
        CacheError is raised and nothing is evicted. Nothing needed: nothing evicted, never refused.
        Returns (entries, bytes) evicted."""
        if need <= 0:
            return 0, 0
        self.clean_staging()
        entries = self.entries()
        others = self.others_bytes()
        # our own live staging temporaries (another job's downloads in progress) take room too
        used = sum(int(e.get("size") or 0) for e in entries) + self.staging_bytes() + others
        if used + need <= self.budget:
            return 0, 0
        held = self.held(current_job) | keep
        evictable = sorted((e for e in entries if e["id"] not in held), key=lambda e: e.get("last_used") or 0)
        if used - sum(int(e.get("size") or 0) for e in evictable) + need > self.budget:
            held_bytes = sum(int(e.get("size") or 0) for e in entries if e["id"] in held)
            raise CacheError(
                f"the dataset needs {human_bytes(need)} more in the cache at {self.root}, whose budget is "
                f"{human_bytes(self.budget)} ({self.budget_setting}); {human_bytes(held_bytes)} of it is held by "
                f"running jobs of yours and {human_bytes(others)} by other users' entries (as the prolog last "
                f"measured them, each user counted up to {self.user_share:.0%} of the budget, data.user_cache_share)"
                ", so it cannot fit and nothing was evicted", kind="budget",
                fix=f"Use `cache: none` for this dataset, run it after your running jobs end, or ask the operator "
                    f"for a larger {self.budget_setting}")
        evicted = freed = 0
        for entry in evictable:
            if used + need <= self.budget:
                break
            self.remove(entry["id"])
            used -= int(entry.get("size") or 0)
            evicted += 1
            freed += int(entry.get("size") or 0)
        return evicted, freed

    # --- the run's view ------------------------------------------------------------------------------
    def view_dir(self, run_id: str, name: str) -> Path:
        return view_path(self.root, self.user, run_id, name)

    def make_view(self, run_id: str, name: str, objects: list[RemoteObject]) -> Path:
        """The run's dataset at its stable path: a symlink to a directory of symlinks (key -> entry) named by
        its content. Several tasks may make the same view at once (the nodes of a job on the shared tier):
        each builds the content directory in a temporary name and renames it into place (the first wins,
        the rest find it made), then swaps the stable path's symlink with a rename, so a reader sees the
        old view or the new one, never half, and no maker fails because another one is at work."""
        final = self.view_dir(run_id, name)
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        listing = "\n".join(f"{obj.relative}\0{obj.entry_id}" for obj in sorted(objects, key=lambda o: o.relative))
        content = f".{name}-{hashlib.sha256(listing.encode()).hexdigest()[:16]}"
        with contextlib.suppress(OSError):
            if os.readlink(final) == content and (final.parent / content).is_dir():
                return final  # made already, by this task's earlier attempt or by another task
        if not (final.parent / content).is_dir():
            tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{name}-tmp-"))
            for obj in objects:
                link = tmp / obj.relative
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(self.object_path(obj.entry_id), link)
            try:
                os.rename(tmp, final.parent / content)
            except OSError:  # another task made it first (ENOTEMPTY/EEXIST): the same content
                shutil.rmtree(tmp, ignore_errors=True)
        if final.is_dir() and not final.is_symlink():  # a view an older version made as a directory
            with contextlib.suppress(OSError):
                aside = final.parent / f".{name}-old-{os.getpid()}-{time.time_ns()}"
                os.rename(final, aside)
                shutil.rmtree(aside, ignore_errors=True)
        link = final.parent / f".{name}-link-{os.getpid()}-{time.time_ns()}"
        os.symlink(content, link)
        os.replace(link, final)
        return final

def view_path(root: str | os.PathLike, user: str, run_id: str, name: str) -> Path:
    """The run's stable path of a dataset in a cache (what $SLURMCTL_DATA_<NAME> names)."""
    return Path(root) / user / "views" / run_id / name


def job_alive(job_id: str) -> bool:
    """Whether Slurm still knows `job_id` as pending or running (an unanswered query counts as alive:
    eviction must never take data from under a job it could not ask about)."""
    if not job_id.isdigit():
        return False
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return True
    if out.returncode != 0:
        return "Invalid job id" not in out.stderr
    return bool(out.stdout.strip())


def list_objects(src: str, options: dict):
    """(filesystem, [(remote path, RemoteObject)]) of every object under `src`, in key order."""
    import fsspec  # the object-store client: only a job that stages a dataset needs it

    fs, prefix = fsspec.core.url_to_fs(src, **options)
    scheme = src.split("://", 1)[0]
    found = fs.find(prefix, detail=True)
    out, skipped = [], 0
    for path, info in sorted(found.items()):
        if info.get("type", "file") != "file":
            continue
        relative = path[len(prefix):].lstrip("/") if path.startswith(prefix) else None
        if not relative or not safe_relative(relative):
            skipped += 1
            continue
        out.append((path, describe(info, f"{scheme}://{path}", relative)))
    return fs, out, skipped


class Dataset:
    """A run's dataset as the training reads it: `open_dataset("shards")` -> .files, .open(file).
    Cached: the files of the run's view on this node. `cache: none`: the objects in the store, read
    through fsspec with the site's options (the plan in the run dir)."""

    def __init__(self, name: str, run_dir: str | os.PathLike | None = None):
        run_dir = Path(run_dir or os.environ.get("SLURMCTL_RUN_DIR", "."))
        plan = read_json(run_dir / rundir.DATA_PLAN) or {}
        entry = next((d for d in plan.get("datasets", []) if d.get("name") == name), None)
        if entry is None:
            raise CacheError(f"the run declares no dataset {name!r} (run.yaml data:)")
        self.name, self.cache, self.location = name, entry["cache"], entry["path"]
        if self.cache == "none":
            self._fs, objects, _ = list_objects(entry["src"], plan.get("options", {}).get(entry["src"], {}))
            self.files = [remote for remote, _obj in objects]
        else:
            self._fs = None
            base = Path(self.location)
            self.files = sorted(str(p) for p in base.rglob("*") if p.is_file())

    def open(self, file: str):
        return self._fs.open(file, "rb", block_size=CHUNK) if self._fs is not None else open(file, "rb")


def open_dataset(name: str, run_dir: str | os.PathLike | None = None) -> Dataset:
    return Dataset(name, run_dir)
