"""Every Slurm job state and every entry of Slurm's job_state_reason table has a specific explanation.

The reason table is tests/fixtures/slurm_job_state_reasons.json, copied from SchedMD/slurm
src/common/job_state_reason.c (commit in the file).
"""

import json
from pathlib import Path

import pytest

from slurmctl.observe.explain import (
    SHORT_STATES,
    STATES,
    explain_reason,
    explain_state,
    explain_word,
    parse_limit_family,
)

TABLE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "slurm_job_state_reasons.json").read_text())
REASONS = sorted({r["string"] for r in TABLE["reasons"]})
OLDER = TABLE["removed_since_22_05"]  # still printed by the Slurm 22.05 the local cluster runs
# base states and flags from slurm.h (enum job_states + JOB_* flags as squeue/sacct print them)
SLURM_STATES = ["PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "LAUNCH_FAILED", "UPDATE_DB", "REQUEUED",
                "REQUEUE_HOLD", "SPECIAL_EXIT", "RESIZING", "CONFIGURING", "COMPLETING", "STOPPED",
                "RECONFIG_FAIL", "POWER_UP_NODE", "REVOKED", "REQUEUE_FED", "RESV_DEL_HOLD", "SIGNALING",
                "STAGE_OUT"]


def test_the_table_is_slurms_whole_table():
    assert TABLE["source"].startswith("https://github.com/SchedMD/slurm/")
    assert len(TABLE["reasons"]) == 218 and len(REASONS) == 216  # Slurm 25.x: PartitionDown and one BB entry repeat


@pytest.mark.parametrize("reason", REASONS + OLDER)
def test_every_reason_in_slurms_table_is_explained_specifically(reason):
    expl = explain_reason(reason)
    assert expl is not None and expl.known, reason
    assert expl.kind != "unknown" and reason not in expl.headline
    assert len(expl.headline) > 25 and expl.action


def test_reasons_get_distinct_explanations():
    headlines = {explain_reason(r).headline for r in REASONS}
    assert len(headlines) > 120  # families share a template but differ by scope/resource/per


@pytest.mark.parametrize("state", SLURM_STATES)
def test_every_state_is_explained(state):
    assert explain_state(state).known and explain_state(state.lower()).known


def test_short_codes_and_combined_states():
    assert set(SHORT_STATES.values()) <= set(STATES)
    assert explain_state("PD") == STATES["PENDING"] and explain_state("CG") == STATES["COMPLETING"]
    assert explain_state("CANCELLED by 0") == STATES["CANCELLED"]
    combined = explain_state("PENDING+REQUEUED")
    assert "queue" in combined.headline and combined.known


@pytest.mark.parametrize("reason, words, kind", [
    ("QOSMaxGRESPerUser", ["Your running jobs", "GPUs", "per user"], "wait"),
    ("AssocGrpGRES", ["Everyone in your account", "GPUs"], "wait"),
    ("AssocGrpBillingMinutes", ["budget", "your account"], "blocked"),
    ("QOSGrpGRESRunMinutes", ["remaining time limit of running jobs"], "wait"),
    ("QOSMaxWallDurationPerJobLimit", ["time limit"], "blocked"),
    ("MaxGRESPerAccount", ["Your account's running jobs", "GPUs"], "wait"),
    ("AssocMaxGRESPerNode", ["per node"], "blocked"),
    ("QOSMinGRES", ["fewer GPUs"], "blocked"),
    ("QOSMaxSubmitJobPerUserLimit", ["You have", "queued and running jobs"], "wait"),
    ("AssocMaxCpuMinutesPerJobLimit", ["CPUs x minutes", "single job"], "blocked"),
    ("MaxBillingRunMinsPerUser", ["Your running jobs", "billed usage", "x remaining time limit", "QOS"], "wait"),
    ("MaxGRESRunMinsPerAccount", ["Your account's running jobs", "GPUs", "per account"], "wait"),
    ("AssocGrpBillingRunMinutes", ["billed usage", "remaining time limit"], "wait"),
])
def test_families_are_parsed_structurally(reason, words, kind):
    expl = explain_reason(reason)
    assert expl.kind == kind, expl
    for word in words:
        assert word in expl.headline, (word, expl.headline)


def test_combinations_missing_from_the_table_are_still_explained():
    # Slurm has no QOSGrpLicensePerUser / AssocMaxBillingPerUser; the structure still reads them right
    family = parse_limit_family("AssocMaxBillingPerUser")
    assert family and (family.scope, family.kind, family.resource, family.per) == ("Assoc", "Max", "Billing", "User")
    assert "billed usage" in explain_reason("AssocMaxBillingPerUser").headline
    assert explain_reason("QOSMaxEnergyPerAccount").known


def test_squeue_decoration_and_case():
    assert explain_reason("(ReqNodeNotAvail, UnavailableNodes:h100-[1-2])").headline.startswith("Nodes the job needs")
    assert explain_reason("priority").known
    assert explain_reason("") is None and explain_reason("(null)") is None


def test_unknown_words_say_so_honestly():
    expl = explain_reason("FluxCapacitorLimit")
    assert not expl.known and "does not know" in expl.headline
    assert explain_word("FluxCapacitorLimit")[0] == "unknown"
    assert explain_word("PD")[0] == "state" and explain_word("Resources")[0] == "reason"
