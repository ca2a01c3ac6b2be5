"""The operator's actions on nodes through Slurm's CLI: drain and resume a node, read its line, and the
reservations that fence a node while it is verified (node health, maintenance, the prolog's drains).

A mixin of SlurmClient (slurmctl.slurm.client), which provides ``_run`` (every command as an argv list)."""

from __future__ import annotations

import re


class NodeAdministration:
    def drain_node(self, node: str, reason: str, timeout: float = 60.0) -> None:
        """Drain `node` with `reason` (shown by `sinfo -R`; Slurm keeps 250 characters or so)."""
        self._run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout=timeout)

    def node_line(self, node: str, timeout: float = 60.0) -> str:
        """`scontrol show node -o <node>`: one Key=Value line (Reason/Comment, operators' text, come last)."""
        return self._run(["scontrol", "show", "node", "-o", node], timeout=timeout).stdout.strip()

    def resume_node(self, node: str, timeout: float = 60.0) -> None:
        """`state=resume`: a drained node takes jobs again (a reservation on it still fences it)."""
        self._run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=timeout)

    def create_reservation(self, name: str, node: str, minutes: int | None, users: str = "root",
                           timeout: float = 60.0) -> None:
        """A reservation of `node` from now for `users` only, `minutes` long or (None)
        UNLIMITED (Slurm 22.05 makes that 365 days); IGNORE_JOBS: a job still ending there does not
        refuse it."""
        duration = "UNLIMITED" if minutes is None else str(int(minutes))
        self._run(["scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={node}",
                   "StartTime=now", f"Duration={duration}", f"Users={users}", "Flags=IGNORE_JOBS"],
                  timeout=timeout)

    def delete_reservation(self, name: str, timeout: float = 60.0) -> bool:
        """False when there was none of that name."""
        result = self._run(["scontrol", "delete", f"ReservationName={name}"], timeout=timeout, check=False)
        return result.returncode == 0

    def reservation_exists(self, name: str, timeout: float = 60.0) -> bool:
        result = self._run(["scontrol", "show", "reservation", name], timeout=timeout, check=False)
        return result.returncode == 0 and f"ReservationName={name} " in result.stdout

    def reservation_names(self, timeout: float = 60.0) -> list[str]:
        """Every reservation's name (operators name them; "No reservations in the system" is none)."""
        result = self._run(["scontrol", "show", "reservation", "-o"], timeout=timeout)
        return [m[1] for m in re.finditer(r"^ReservationName=(\S+)", result.stdout, re.MULTILINE)]
