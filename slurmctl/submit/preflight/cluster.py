"""Checks against the live cluster: partition, GPU type, node shape, time limit, account, memory."""

from __future__ import annotations

import json
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from slurmctl.config.models import RunSpec, SiteConfig
from slurmctl.durations import slurm_time
from slurmctl.errors import SlurmCommandError, SpecError
from slurmctl.fsutil import read_json, write_atomic
from slurmctl.slurm.client import Association, NodeInfo, PartitionInfo, SlurmClient
from slurmctl.slurm.runner import LocalRunner
from slurmctl.submit.memory import estimate_memory, parse_params, resolve_model
from slurmctl.submit.preflight.findings import CheckResult, error, warning

# The user's accounts change rarely and sacctmgr is the slowest query of a submit (~0.3 s), so they
# come from a per-user cache this young; a check that fails on them asks sacctmgr again.
ASSOCIATIONS_TTL_SECONDS = 300


@dataclass
class ClusterView:
    """What preflight needs from Slurm, fetched once so checks are pure functions: two sinfo calls
    (run side by side) and, when the site names an account to check, the user's associations."""

    nodes: list[NodeInfo]
    partitions: dict[str, PartitionInfo]
    associations: list[Association] | None  # None: accounting did not answer (or was not asked)
    associations_cached: bool = False  # from the per-user cache: re-asked when a check fails on them

    @classmethod
    def query(cls, client: SlurmClient, user: str, *, associations: bool = True,
              cache: Path | None = None) -> ClusterView:
        """`associations=False`: the site checks no account, so sacctmgr is not asked. `cache`: a
        per-user file that answers for the associations while it is young (``associations_cache``)."""
        cached = _read_cached_associations(cache, user) if associations and cache else None

        def ask_associations() -> list[Association] | None:
            try:
                found = client.associations(user)
            except SlurmCommandError:
                return None
            if cache:
                _write_cached_associations(cache, user, found)
            return found

        # A local runner starts independent processes, so the queries run side by side; an SSH
        # runner's one connection is used by one query at a time.
        with ThreadPoolExecutor(3 if isinstance(getattr(client, "runner", None), LocalRunner) else 1) as pool:
            nodes = pool.submit(client.nodes)
            partitions = pool.submit(client.partitions)
            asked = pool.submit(ask_associations) if associations and cached is None else None
            return cls(nodes.result(), partitions.result(), cached if asked is None else asked.result(),
                       associations_cached=cached is not None)

    def with_fresh_associations(self, client: SlurmClient, user: str, cache: Path | None = None) -> ClusterView:
        try:
            found = client.associations(user)
        except SlurmCommandError:
            found = None
        if cache and found is not None:
            _write_cached_associations(cache, user, found)
        return ClusterView(self.nodes, self.partitions, found)


def associations_cache(cluster: str) -> Path | None:
    """~/.cache/slurmctl/associations-<cluster>.json (XDG_CACHE_HOME honoured); None for a cluster
    name that is no plain file name."""
    if not cluster or not all(c.isalnum() or c in "._-" for c in cluster) or cluster.startswith("."):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return base / "slurmctl" / f"associations-{cluster}.json"


def _cache_key(user: str) -> str:
    return f"{user}|{os.geteuid()}|{os.environ.get('SLURM_CONF', '')}"


def _private(path: Path) -> bool:
    """The cache file and its directory are this user's own and no one else may write (the file:
    read) them, the same rule as slurmctl.slurm.cache: a planted or shared file answers nothing."""
    try:
        directory, entry = os.lstat(path.parent), os.lstat(path)
    except OSError:
        return False
    me = os.geteuid()
    return (stat.S_ISDIR(directory.st_mode) and directory.st_uid == me and not directory.st_mode & 0o022
            and stat.S_ISREG(entry.st_mode) and entry.st_uid == me and not entry.st_mode & 0o077)


def _read_cached_associations(path: Path, user: str) -> list[Association] | None:
    data = read_json(path) if _private(path) else None  # read_json opens no symlink, FIFO or device
    try:
        if data["key"] != _cache_key(user) or not 0 <= time.time() - float(data["time"]) < ASSOCIATIONS_TTL_SECONDS:
            return None
        return [Association(str(a["account"]), [str(q) for q in a["qos"]]) for a in data["associations"]]
    except (TypeError, KeyError, ValueError):
        return None  # missing, foreign or damaged: ask sacctmgr


def _write_cached_associations(path: Path, user: str, found: list[Association]) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"key": _cache_key(user), "time": time.time(),
                                       "associations": [{"account": a.account, "qos": a.qos} for a in found]}),
                     mode=0o600)
    except OSError:
        pass  # a cache that cannot be written only costs the next submit a sacctmgr call


def check_shape(spec: RunSpec, site: SiteConfig, view: ClusterView) -> CheckResult:
    """Partition exists (site and Slurm), GPU type matches, the shape fits on its nodes: the nodes
    present, or for an autoscaled pool (site.yaml `max_nodes`) the nodes it can scale up to."""
    result = CheckResult("cluster", "partition, GPU type and node shape fit the cluster")
    findings = result.findings
    # the partitions themselves (sinfo lists a partition with no node too), not the nodes' partitions:
    # a pool scaled to zero has no node and its partition is still there
    live = set(view.partitions) | {p for n in view.nodes for p in n.partitions}
    for name in spec.partitions:
        if name not in site.partitions or name not in live:
            known = ", ".join(sorted(set(site.partitions) & live)) or "none"
            findings.append(error("unknown-partition", f"partition '{name}' does not exist on cluster {site.cluster}.",
                                  f"Set `partition` in run.yaml to one of: {known}."))
            continue
        part = site.partitions[name]
        if spec.gpu_type and spec.gpu_type != part.gpu_type:
            offering = sorted(p for p, c in site.partitions.items() if c.gpu_type == spec.gpu_type)
            findings.append(error(
                "gpu-type-mismatch", f"partition '{name}' has {part.gpu_type} GPUs, not '{spec.gpu_type}'.",
                f"Use a partition with {spec.gpu_type} GPUs ({', '.join(offering)})" if offering else
                f"No partition has '{spec.gpu_type}' GPUs; known types: "
                f"{', '.join(sorted({c.gpu_type for c in site.partitions.values()}))}. Fix `gpu_type` in run.yaml."))
            continue
        if part.max_nodes:
            most_gpus, fitting, which = part.gpus_per_node, part.max_nodes, "the pool's nodes (site.yaml)"
        else:
            members = [n for n in view.nodes if name in n.partitions]
            most_gpus = max((n.gpus for n in members), default=0)
            fitting, which = sum(n.gpus >= spec.gpus_per_node for n in members), "nodes"
        if spec.gpus_per_node > most_gpus:
            findings.append(error(
                "too-many-gpus",
                f"gpus_per_node={spec.gpus_per_node} but {which} in '{name}' have at most {most_gpus}.",
                f"Set `gpus_per_node` to {most_gpus} or fewer and raise `nodes` instead."))
            continue  # "0 nodes fit" would only repeat it
        if spec.nodes > fitting:
            grows = f" (its pool scales up to {fitting})" if part.max_nodes else ""
            findings.append(error(
                "too-many-nodes",
                f"nodes={spec.nodes} but partition '{name}' has only {fitting} node(s) that fit{grows}.",
                f"Set `nodes` to {fitting} or fewer."))
    if not findings:
        result.note = f"{spec.nodes} node(s) x {spec.gpus_per_node} GPU(s) on {', '.join(spec.partitions)}"
    return result


def check_time_limit(spec: RunSpec, view: ClusterView) -> CheckResult:
    result = CheckResult("time-limit", "time limit within the partition's MaxTime")
    for name in spec.partitions:
        info = view.partitions.get(name)
        if info is None:
            continue  # unknown partitions are reported by check_shape
        if info.max_time_seconds is not None and spec.time_limit_seconds > info.max_time_seconds:
            result.findings.append(error(
                "time-limit-too-long",
                f"time_limit {spec.time_limit} is above partition '{name}' MaxTime "
                f"{slurm_time(info.max_time_seconds)}; "
                "the job would pend forever (PartitionTimeLimit).",
                f"Set `time_limit` to {slurm_time(info.max_time_seconds)} or less and resume from checkpoints."))
        if info.available != "up":
            result.findings.append(warning("partition-unavailable", f"partition '{name}' is {info.available}.",
                                           "The job will wait until an admin brings it up; ask, or pick another."))
    result.note = slurm_time(spec.time_limit_seconds)
    return result


def check_account(site: SiteConfig, view: ClusterView, user: str, partitions: list[str]) -> CheckResult:
    result = CheckResult("account", "you may submit to the account")
    if not site.account:
        result.note = "no account set (cluster default)"
        return result
    if view.associations is None:
        result.findings.append(warning("cannot-verify-account", f"sacctmgr did not answer; account '{site.account}' "
                                       "not checked.", "If sbatch refuses the account, ask your admin for access."))
        return result
    allowed: dict[str, list[str]] = {}  # an account's QOS over all its associations (one per partition too)
    for a in view.associations:
        allowed.setdefault(a.account, []).extend(q for q in a.qos if q not in allowed.get(a.account, []))
    if site.account not in allowed:
        result.findings.append(error(
            "account-not-allowed", f"user {user} has no association with account '{site.account}'.",
            f"Your accounts: {', '.join(sorted(allowed)) or 'none'}; ask your admin to add you to '{site.account}'."))
        return result
    result.note = f"{site.account} (QOS {', '.join(allowed[site.account]) or 'default'})"
    for name in partitions:
        qos = site.partitions[name].qos if name in site.partitions else None
        if qos and allowed[site.account] and qos not in allowed[site.account]:
            result.findings.append(error(
                "qos-not-allowed", f"partition {name} runs jobs under QOS '{qos}' (site.yaml), which account "
                f"'{site.account}' does not have for user {user} (it has: {', '.join(allowed[site.account])}).",
                f"Ask your admin to give '{site.account}' the QOS '{qos}', or use another partition (--where)."))
    return result


def check_memory(spec: RunSpec, site: SiteConfig, smoke: bool = False, workdir: Path | None = None) -> CheckResult:
    """Model states + activations vs GPU memory, for each GPU model the run may land on, with the
    sharding the run's template uses (memory.resolve_model)."""
    result = CheckResult("memory", "model fits in GPU memory")
    if spec.model is None:
        result.note = "skipped (no `model:` in run.yaml)"
        return result
    try:
        parse_params(spec.model.params)
        if spec.model.trainable_params is not None:
            parse_params(spec.model.trainable_params)
        model = resolve_model(spec, workdir or Path.cwd())
    except ValueError as exc:
        result.findings.append(error("invalid-model-size", f"`model.params`/`trainable_params`: {exc}.",
                                     "Write e.g. params: 7b"))
        return result
    except SpecError as exc:
        result.findings.append(error("invalid-deepspeed-config", exc.message, exc.hint))
        return result
    gpu_types = dict.fromkeys(spec.gpu_type or site.partitions[p].gpu_type
                              for p in spec.partitions if p in site.partitions)
    notes = []
    for gpu_type in gpu_types:
        est = estimate_memory(model, gpu_type, spec.nodes * max(spec.gpus_per_node, 1), site.gpu_memory_gb)
        if est is None:
            result.findings.append(warning("unknown-gpu-memory", f"memory of a {gpu_type} GPU is unknown; not checked.",
                                           f"Add `gpu_memory_gb: {{{gpu_type}: <GB>}}` to site.yaml."))
            continue
        batch = f"max safe micro-batch ≈ {est.max_micro_batch}" if est.max_micro_batch is not None else \
            "set model.seq_len, hidden_size and num_layers for a micro-batch estimate"
        sizing = (f"{est.total_gb:.1f} GB of ~{est.usable_gb:.0f} GB usable per {gpu_type} "
                  f"(states {est.states_gb:.1f} GB with {model.sharding} over {est.data_parallel} GPU(s))")
        if est.verdict == "does-not-fit":
            need = "the model states alone" if est.states_gb > est.usable_gb else \
                f"micro_batch={est.micro_batch}" if est.micro_batch else "one sequence"
            make = warning if smoke else error
            result.findings.append(make(
                "memory-does-not-fit", f"does not fit: {need} need {sizing}; {batch}.",
                "Lower model.micro_batch, shard more (sharding: zero2/zero3/fsdp over more GPUs), "
                "turn on activation_checkpointing, or use GPUs with more memory."))
        else:
            notes.append(f"fits: {sizing}; {batch}")
    result.note = "; ".join(notes)
    return result
