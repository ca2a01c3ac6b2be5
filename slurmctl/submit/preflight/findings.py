"""Findings and the checklist they make up."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from slurmctl.errors import PreflightFailed

# Findings `--force` cannot override: a credential written into job.sbatch and run.yaml stays
# readable in the run directory after the run, whatever the user meant by forcing.
UNFORCEABLE = frozenset({"credential-in-env", "secret-in-script"})


@dataclass(frozen=True)
class Finding:
    code: str
    level: str  # "error" | "warning"
    message: str
    hint: str

    def to_dict(self) -> dict:
        return asdict(self)


def error(code: str, message: str, hint: str) -> Finding:
    return Finding(code, "error", message, hint)


def warning(code: str, message: str, hint: str) -> Finding:
    return Finding(code, "warning", message, hint)


@dataclass
class CheckResult:
    """One line of the checklist: what was checked, what it found, and a note when it passed."""

    name: str
    title: str
    findings: list[Finding] = field(default_factory=list)
    note: str = ""

    @property
    def status(self) -> str:
        levels = {f.level for f in self.findings}
        return "error" if "error" in levels else "warning" if levels else "ok"

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "status": self.status, "note": self.note,
                "findings": [f.to_dict() for f in self.findings]}


@dataclass
class PreflightReport:
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for c in self.checks for f in c.findings]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def unforceable(self) -> list[Finding]:
        return [f for f in self.errors if f.code in UNFORCEABLE]

    def must_stop(self, force: bool) -> bool:
        """Errors stop a submission unless forced; credential findings stop it even when forced."""
        return bool(self.unforceable) if force else bool(self.errors)

    def add(self, result: CheckResult) -> None:
        self.checks.append(result)

    def to_dict(self) -> dict:
        return {"checks": [c.to_dict() for c in self.checks]}


def raise_on_errors(report: PreflightReport) -> None:
    if report.errors:
        raise PreflightFailed(report)
