"""Blame from diagnosis: which nodes are suspects, from the failures their own epilogs classified.

A failed job's epilog, on each of its nodes, classifies the job's log with `diagnose` (read as the
job's user, bounded) and leaves one record in that node's root-owned failure spool: the job, its
user's uid, the job's nodes, the category. The node's periodic health program judges them
(`suspect`): GPU- or NCCL-class failures of two or more distinct jobs within the window make the
node a suspect only when the node is what those jobs have in common:
  - the nodes every one of those jobs ran on are this node alone (a multi-node job's failure does
    not single out any one of its nodes; a bad node's peers each share one failure with it, the
    bad node collects them all), and
  - the failures come from two or more users, or from one user's jobs on different node sets
    (the other nodes were clean, this one failed each time). One user's jobs on the same nodes
    again and again say nothing the user could not have arranged.
A node that passed a verification is not suspected again on one user's failures for
RESUSPECT_HOLD_SECONDS (and the records the pass answered are cleared). A suspect is drained
`slurmctl:[node_problem] suspect: ...`; its verification job decides its return.

User-code failures (import errors, OOM, NaN loss, data shapes ...) never count. A user can print
NCCL-like lines on purpose: with jobs on different node sets (or with a second user) that buys a
verification cycle of the node (minutes out of service), at most once per RESUSPECT_HOLD_SECONDS
per node from one user alone (docs/node-health.md, SECURITY.md). The GPU-hours lost to a node
charge only the failures this rule took as evidence (`accepted`), so the same bound holds there.
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from dataclasses import dataclass

from slurmctl.ops.hooks.rootfs import open_trusted_dir, publish_file, read_small, remove_entry

# no_gpu is not here: "no CUDA GPUs are available" is nearly always the job's own setup (a CPU-only torch
# build, CUDA_VISIBLE_DEVICES changed, no GPUs asked for); a node whose GPUs are gone fails its gpu check.
GPU_CLASS = frozenset({"nccl_timeout", "nccl_error", "nccl_setup", "gpu_hardware", "cuda_illegal_access"})
WINDOW_SECONDS = 24 * 3600
SUSPECT_SCORE = 2
RESUSPECT_HOLD_SECONDS = 6 * 3600
PASSED_MARK = "passed"  # <spool>/passed: when this node last passed a verification (its mtime, root's)
MAX_RECORDS = 1000  # a node's spool is read whole by every periodic run: older records past this are skipped


@dataclass(frozen=True)
class Failure:
    job_id: int
    category: str
    end_time: float
    uid: int = -1  # -1: not recorded (counts as one unknown user)
    nodes: tuple[str, ...] = ()  # the job's nodes; () when not recorded (counts as this node alone)

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "category": self.category, "end_time": self.end_time,
                "uid": self.uid, "nodes": list(self.nodes)}


def counted(failures: list[Failure], now: float, window: float = WINDOW_SECONDS) -> dict[int, Failure]:
    """{job id: failure} of the distinct jobs with a GPU/NCCL-class failure within `window` before `now`."""
    found: dict[int, Failure] = {}
    for f in failures:
        if f.category in GPU_CLASS and now - window <= f.end_time <= now + 60:
            found.setdefault(f.job_id, f)
    return found


def score(failures: list[Failure], now: float, window: float = WINDOW_SECONDS) -> int:
    """Distinct jobs with a GPU/NCCL-class failure within `window` before `now`."""
    return len(counted(failures, now, window))


@dataclass(frozen=True)
class Verdict:
    suspect: bool
    why: str


def suspect(node: str, failures: list[Failure], now: float, last_pass: float | None = None) -> Verdict:
    """Is `node` the common factor of the GPU/NCCL-class failures recorded on it within 24 h (module
    doc), and not held by a recent pass?"""
    jobs = counted(failures, now)
    verdict = common_factor(node, jobs, "within 24 h")
    if verdict.suspect and held(len({f.uid for f in jobs.values() if f.uid >= 0}), now, last_pass):
        ids = ",".join(str(j) for j in sorted(jobs, reverse=True))
        return Verdict(False, f"jobs {ids}: one user's, within {RESUSPECT_HOLD_SECONDS // 3600} h "
                              "of a passed verification")
    return verdict


def held(users: int, now: float, last_pass: float | None) -> bool:
    """One user's evidence within RESUSPECT_HOLD_SECONDS of a passed verification makes no suspect."""
    return users < 2 and last_pass is not None and now - last_pass < RESUSPECT_HOLD_SECONDS


def qualifies(jobs: int, only_this_node: bool, users: int, node_sets: int) -> bool:
    """The evidence rule on its counts (common_factor says it in words): two or more jobs, this node
    the only node they all ran on, two or more users or two or more node sets."""
    return jobs >= SUSPECT_SCORE and only_this_node and (users >= 2 or node_sets >= 2)


def accepted(node: str, failures: list[Failure], passes: list[float], now: float) -> set[Failure]:
    """The failures on `node` that `suspect` took as its evidence at some moment up to `now`: the
    drain rule replayed over time, the GPU-hours lost to a node (lost.py) charge these alone.

    `passes`: when the node passed a verification. Each pass starts the rule afresh, as on the node
    (the pass clears the records it answered, and one user's failures are held for
    RESUSPECT_HOLD_SECONDS after it): evidence from before a pass never makes a later failure
    count. Between passes the rule is judged at every failure's end and at the hold's end (the only
    moments its verdict can turn; a failure leaving the window only weakens it), each time over the
    failures of the window since the pass (`suspect`'s: WINDOW_SECONDS before, 60 s after); when it
    holds, those failures are its evidence. The window slides (_Window): linear in the failures, so
    no user's flood of failed jobs slows the exporter down quadratically."""
    found: set[Failure] = set()
    bounds = [float("-inf"), *sorted(p for p in passes if p <= now), float("inf")]
    for since, until in zip(bounds, bounds[1:]):
        last_pass = since if since != float("-inf") else None
        epoch = sorted((f for f in failures if since < f.end_time <= until and f.category in GPU_CLASS),
                       key=lambda f: (f.end_time, f.job_id))
        moments = {f.end_time for f in epoch}
        if last_pass is not None:
            moments.add(last_pass + RESUSPECT_HOLD_SECONDS)
        window, first, last, covered = _Window(node), 0, 0, 0
        for moment in sorted(m for m in moments if since < m <= min(until, now)):
            while last < len(epoch) and epoch[last].end_time <= moment + 60:
                window.add(epoch[last])
                last += 1
            while first < last and epoch[first].end_time < moment - WINDOW_SECONDS:
                window.remove(epoch[first])
                first += 1
            if window.suspect(moment, last_pass):
                found.update(epoch[max(first, covered):last])
                covered = last
    return found


class _Window:
    """The counts `suspect` judges, over the failures in a sliding window: one failure per job (the
    job's earliest in the window, as `counted` takes the first of a list sorted by end time)."""

    def __init__(self, node: str):
        self.node = node
        self.by_job: dict[int, deque[Failure]] = {}
        self.nodes: Counter[str] = Counter()  # node -> how many jobs' node sets hold it
        self.users: Counter[int] = Counter()
        self.node_sets: Counter[frozenset] = Counter()

    def _count(self, f: Failure, sign: int) -> None:
        node_set = frozenset(f.nodes or (self.node,)) | {self.node}
        self.node_sets[node_set] += sign
        self.nodes.update({n: sign for n in node_set})
        if f.uid >= 0:
            self.users[f.uid] += sign
        for counter in (self.node_sets, self.nodes, self.users):
            for key in [k for k, v in counter.items() if v <= 0]:
                del counter[key]

    def add(self, f: Failure) -> None:
        queue = self.by_job.setdefault(f.job_id, deque())
        queue.append(f)
        if len(queue) == 1:
            self._count(f, +1)

    def remove(self, f: Failure) -> None:
        """`f` is its job's earliest in the window (the window drops failures in end-time order)."""
        queue = self.by_job[f.job_id]
        queue.popleft()
        self._count(f, -1)
        if queue:
            self._count(queue[0], +1)
        else:
            del self.by_job[f.job_id]

    def suspect(self, now: float, last_pass: float | None) -> bool:
        jobs, users = len(self.by_job), len(self.users)
        only_this_node = not any(count == jobs for n, count in self.nodes.items() if n != self.node)
        return qualifies(jobs, only_this_node, users, len(self.node_sets)) and not held(users, now, last_pass)


def common_factor(node: str, jobs: dict[int, Failure], when: str) -> Verdict:
    """The evidence rule itself, over {job id: its GPU/NCCL-class failure that ran on `node`}: two or
    more jobs, `node` the only node they all ran on, and two or more users or one user's jobs on
    two or more node sets. Blame (suspect) uses it, and through `accepted` the GPU-hours lost to a node."""
    ids = ",".join(str(j) for j in sorted(jobs, reverse=True))
    if len(jobs) < SUSPECT_SCORE:
        return Verdict(False, f"{len(jobs)} job(s) with GPU/NCCL-class failures here {when}")
    node_sets = {frozenset(f.nodes or (node,)) | {node} for f in jobs.values()}
    common = frozenset.intersection(*node_sets)
    # a record without its uid (written before uids were kept) is no second user's evidence
    users = {f.uid for f in jobs.values() if f.uid >= 0}
    if common != {node}:
        return Verdict(False, f"jobs {ids} failed on {','.join(sorted(common))} together: no single node to blame")
    if not qualifies(len(jobs), True, len(users), len(node_sets)):
        return Verdict(False, f"jobs {ids}: one user's jobs on the same node(s) only")
    return Verdict(True, f"{len(jobs)} jobs of {len(users)} user(s) on {len(node_sets)} node set(s) with "
                         f"GPU/NCCL-class failures here {when}: {ids}")


def mark_passed(spool, now: float) -> None:
    """Remember that this node just passed a verification (suspect's hold on one user's failures)."""
    fd = open_trusted_dir(spool, create_mode=0o755)
    try:
        publish_file(fd, PASSED_MARK, f"{now}\n".encode(), mode=0o644, durable=False)
    finally:
        os.close(fd)


def passed_at(spool) -> float | None:
    try:
        fd = open_trusted_dir(spool)
    except OSError:
        return None
    try:
        return float(read_small(fd, PASSED_MARK, 64))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def record(spool, failure: Failure) -> None:
    """<spool>/<job id>.json, root's (a job's epilog on this node writes its own once)."""
    fd = open_trusted_dir(spool, create_mode=0o755)
    try:
        publish_file(fd, f"{failure.job_id}.json", (json.dumps(failure.to_dict()) + "\n").encode(), mode=0o644,
                     durable=False)
    finally:
        os.close(fd)


def read(spool) -> list[Failure]:
    try:
        fd = open_trusted_dir(spool)
    except OSError:
        return []
    found = []
    try:
        for name in sorted(os.listdir(fd), reverse=True)[:MAX_RECORDS]:
            if not name.endswith(".json"):
                continue
            try:
                data = json.loads(read_small(fd, name, 65536))
                nodes = data.get("nodes") or []
                found.append(Failure(int(data["job_id"]), str(data["category"]), float(data["end_time"]),
                                     int(data.get("uid", -1)),
                                     tuple(str(n) for n in nodes[:256]) if isinstance(nodes, list) else ()))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    finally:
        os.close(fd)
    return found


def clear(spool, answered: list[Failure]) -> None:
    """Forget the failures a passed verification answered."""
    try:
        fd = open_trusted_dir(spool)
    except OSError:
        return
    try:
        for failure in answered:
            remove_entry(fd, f"{failure.job_id}.json")
    finally:
        os.close(fd)
