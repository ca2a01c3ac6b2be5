"""Cluster facts through Slurm's CLI: nodes and partitions (sinfo), placement (sbatch --test-only),
associations and limits (sacctmgr -P: no user-written fields asked for), GPU utilisation (sreport).

A mixin of SlurmClient (slurmctl.slurm.client), which provides ``_run`` (every command as an argv
list) and ``rejects`` (lines that did not parse, counted, never raised)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from slurmctl.durations import parse_slurm_duration, parse_slurm_timestamp
from slurmctl.errors import SlurmCommandError
from slurmctl.slurm.parsing import SEP, columns, gres_gpus, rows, tres_counts
from slurmctl.slurm.records import (
    Association,
    NodeHealthRow,
    NodeInfo,
    NodeUsage,
    PartitionInfo,
    PartitionPolicy,
    QosLimits,
    StartEstimate,
)

_NODES_FORMAT = ["%N", "%P", "%G", "%c", "%m", "%T"]
_NODE_USAGE_FIELDS = ["NodeList", "Partition", "Gres", "GresUsed", "StateLong", "Reason"]
_NODE_HEALTH_FIELDS = ["NodeList", "StateComplete", "UserLong", "TimeStamp", "Gres", "Reason"]
_NO_VALUE = {"none", "None", "(null)", "Unknown", "n/a"}
_TEST_ONLY_RE = re.compile(r"to start at (\S+) using \d+ processors on nodes (\S+) in partition (\S+)")


class ClusterQueries:
    def gpu_utilization(self, start: datetime, end: datetime) -> dict[str, float]:
        """Cluster GPU-hours allocated/down/idle from sreport (complete hours only: slurmdbd rolls up hourly)."""
        result = self._run(["sreport", "-n", "-P", "cluster", "Utilization", "-T", "gres/gpu", "-t", "hours",
                            f"start={start.isoformat(timespec='seconds')}", f"end={end.isoformat(timespec='seconds')}"])
        names = ["allocated", "down", "planned_down", "idle", "planned", "reported"]
        for parts in rows(result.stdout):
            if len(parts) >= 8 and parts[1] == "gres/gpu":
                return {n: float(v) for n, v in zip(names, parts[2:8]) if v.replace(".", "", 1).isdigit()}
        return {}

    # --- nodes and partitions ------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        """Every node with its partitions and GPUs, one sinfo call."""
        result = self._run(["sinfo", "-h", "-N", "-o", SEP.join(_NODES_FORMAT)])
        by_name: dict[str, NodeInfo] = {}
        for line in result.stdout.splitlines():
            values = columns(line, ["name", "partition", "gres", "cpus", "mem", "state"])
            if values is None:
                if line.strip():
                    self.rejects.add("nodes", line)
                continue
            node = by_name.setdefault(values["name"], NodeInfo(name=values["name"]))
            node.partitions.append(values["partition"].rstrip("*"))
            gpus, gpu_type = gres_gpus(values["gres"])
            if gpus:
                node.gpus, node.gpu_type = gpus, gpu_type
            node.cpus = int(values["cpus"]) if values["cpus"].isdigit() else 0
            node.memory_mb = int(values["mem"]) if values["mem"].isdigit() else 0
            node.state = values["state"]
        return list(by_name.values())

    def node_usage(self) -> list[NodeUsage]:
        """GPUs configured/in use, state and reason of every (node, partition), one sinfo call."""
        fmt = ",".join(f"{name}:{SEP}" for name in _NODE_USAGE_FIELDS)
        result = self._run(["sinfo", "-h", "-N", "-O", fmt])
        found = []
        for line in result.stdout.splitlines():
            values = columns(line, _NODE_USAGE_FIELDS)
            if values is None:
                if line.strip():
                    self.rejects.add("node_usage", line)
                continue
            (gpus, gpu_type), (used, _) = gres_gpus(values["Gres"]), gres_gpus(values["GresUsed"])
            reason = values["Reason"]
            found.append(NodeUsage(name=values["NodeList"], partition=values["Partition"].rstrip("*"),
                                   gpu_type=gpu_type, gpus=gpus, gpus_used=used, state=values["StateLong"],
                                   reason="" if reason in {"none", "None", "(null)"} else reason))
        return found

    def node_health_rows(self, node: str | None = None, timeout: float = 60.0) -> list[NodeHealthRow]:
        """State, drain reason, who set it and when, per node (one row each: sinfo repeats a node once
        per partition). Reasons are set by root, operators and slurmd, never by users; still, a reason
        holding the separator is rejected, not split wrong (Reason is the last column for that)."""
        fmt = ",".join(f"{name}:{SEP}" for name in _NODE_HEALTH_FIELDS)
        argv = ["sinfo", "-h", "-N", "-O", fmt, *(["-n", node] if node else [])]
        result = self._run(argv, timeout=timeout)
        found: dict[str, NodeHealthRow] = {}
        for line in result.stdout.splitlines():
            values = columns(line, _NODE_HEALTH_FIELDS)
            if values is None:
                if line.strip():
                    self.rejects.add("node_health", line)
                continue
            clean = {k: ("" if v.strip() in _NO_VALUE else v.strip()) for k, v in values.items()}
            found.setdefault(clean["NodeList"], NodeHealthRow(
                name=clean["NodeList"], state=clean["StateComplete"], reason=clean["Reason"],
                reason_user=clean["UserLong"], reason_time=clean["TimeStamp"], gres=clean["Gres"]))
        return list(found.values())

    def node_events(self, start: datetime, end: datetime,
                    timeout: float = 60.0) -> list[tuple[str, str, str, str, str]]:
        """(node, start, end, state, reason) of every node event (down, drain) accounting holds that
        overlaps the window, one sacctmgr call. Reasons are set by root, operators and slurmd, never by
        users; Reason is the last column, so one holding the separator stays whole."""
        argv = ["sacctmgr", "-n", "-P", "show", "event", f"start={start.isoformat(timespec='seconds')}",
                f"end={end.isoformat(timespec='seconds')}", "format=NodeName,TimeStart,TimeEnd,State,Reason"]
        found = []
        for line in self._run(argv, timeout=timeout).stdout.splitlines():
            parts = line.split("|", 4)
            if len(parts) == 5 and parts[0]:  # a cluster event (TRES registered) names no node
                found.append((parts[0], parts[1], parts[2], parts[3], parts[4]))
        return found

    def partitions(self) -> dict[str, PartitionInfo]:
        """Each partition's MaxTime and availability, one sinfo call."""
        result = self._run(["sinfo", "-h", "-o", SEP.join(["%R", "%l", "%a"])])
        found = {}
        for line in result.stdout.splitlines():
            values = columns(line, ["name", "limit", "available"])
            if values is not None:
                found[values["name"]] = PartitionInfo(values["name"], parse_slurm_duration(values["limit"]),
                                                      values["available"])
        return found

    def partition_policies(self) -> dict[str, PartitionPolicy]:
        """Each partition's AllowQos, DenyQos, partition QOS and MaxNodes, one scontrol call (every
        field of `scontrol show partition` is the operator's: no user writes one)."""
        result = self._run(["scontrol", "show", "partition", "-o"])
        found = {}
        for line in result.stdout.splitlines():
            values = dict(item.split("=", 1) for item in line.split() if "=" in item)
            name = values.get("PartitionName")
            if not name:
                if line.strip():
                    self.rejects.add("partition_policies", line)
                continue
            allow, deny = values.get("AllowQos", "ALL"), values.get("DenyQos", "")
            max_nodes = values.get("MaxNodes", "UNLIMITED")
            found[name] = PartitionPolicy(
                name, allow_qos=None if allow == "ALL" else frozenset(q for q in allow.split(",") if q),
                deny_qos=frozenset(q for q in deny.split(",") if q and q != "(null)"),
                qos="" if values.get("QoS", "N/A") in {"N/A", "(null)"} else values["QoS"],
                max_nodes=int(max_nodes) if max_nodes.isdigit() else None)
        return found

    def qos_table(self) -> dict[str, QosLimits]:
        """Every QOS's job, user and group caps and MaxWall, one sacctmgr call (-P: '|' apart; no
        field of a QOS is written by a user)."""
        fields = ["Name", "MaxTRES", "MaxTRESPU", "GrpTRES", "MaxJobsPU", "MaxWall"]
        result = self._run(["sacctmgr", "-n", "-P", "show", "qos", f"format={','.join(fields)}"])
        found = {}
        for values in rows(result.stdout):
            if len(values) != len(fields) or not values[0]:
                self.rejects.add("qos_table", "|".join(values))
                continue
            name, per_job, per_user, group, jobs, wall = values
            found[name] = QosLimits(per_job=tres_counts(per_job), per_user=tres_counts(per_user),
                                    group=tres_counts(group), jobs_per_user=int(jobs) if jobs.isdigit() else None,
                                    max_wall_seconds=parse_slurm_duration(wall) if wall else None)
        return found

    # --- preflight and placement ----------------------------------------------------------------
    def test_only(self, script: Path | None, args: Sequence[str] = ()) -> StartEstimate:
        """`sbatch --test-only`: submits nothing; a refusal is an answer, not an error.
        With script=None the options in `args` describe the job (no file needed on a remote login node)."""
        argv = ["sbatch", "--test-only", *args, str(script) if script else "--wrap=true"]
        for pause in (0.5, 1.0, 2.0, None):
            try:
                result = self._run(argv)
                break
            except SlurmCommandError as exc:
                message = exc.message.removeprefix("`sbatch` failed: ").rstrip(".")
                if pause is None or "temporarily unavailable" not in message:  # EAGAIN: slurmctld busy, retry
                    return StartEstimate(ok=False, message=message)
                time.sleep(pause)
        text = f"{result.stderr}\n{result.stdout}"
        m = _TEST_ONLY_RE.search(text)
        if not m:
            return StartEstimate(ok=False, message=text.strip() or "sbatch --test-only gave no estimate")
        return StartEstimate(ok=True, start_time=parse_slurm_timestamp(m.group(1)), nodes=m.group(2),
                             partition=m.group(3))

    # --- associations and limits (sacctmgr -P: no user-written fields asked for) ---------------
    def associations(self, user: str) -> list[Association]:
        """Accounts (with their QOS) the user may submit to, one sacctmgr call."""
        result = self._run(["sacctmgr", "-n", "-P", "show", "associations", f"user={user}", "format=account,qos"])
        return [Association(r[0], [q for q in r[1].split(",") if q] if len(r) > 1 else [])
                for r in rows(result.stdout) if r[0]]

    def qos_limits(self, qos: str, fields: Sequence[str]) -> dict[str, str]:
        """{field: raw value} of one QOS from sacctmgr (e.g. MaxTRESPU -> 'gres/gpu=1')."""
        result = self._run(["sacctmgr", "-n", "-P", "show", "qos", f"name={qos}", f"format=Name,{','.join(fields)}"])
        for values in rows(result.stdout):
            if values[0] == qos:
                return dict(zip(fields, values[1:]))
        return {}

    def assoc_limits(self, account: str, fields: Sequence[str]) -> dict[str, dict[str, str]]:
        """{user ('' = the account's own row): {field: raw value}} for one account, one sacctmgr call."""
        result = self._run(["sacctmgr", "-n", "-P", "show", "associations", f"account={account}",
                            f"format=Account,User,{','.join(fields)}"])
        found = {}
        for values in rows(result.stdout):
            if len(values) >= 2 and values[0] == account:
                found[values[1]] = dict(zip(fields, values[2:]))
        return found
