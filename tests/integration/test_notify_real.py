"""Messages about a run, on the real cluster, as alice: email to a local SMTP server (aiosmtpd), a
Slack-compatible incoming webhook and an HMAC-signed webhook to a loopback receiver.

The channel URLs live only in alice's 0600 secrets file (the test site's `secrets_file`); run.yaml
names the keys. Every scenario checks the exact messages each channel got: a Python exception and a
host memory error fail with the diagnosis category (within 60 s of the job's end), a preempted spot
run that recovers sends `recovered` once and `finished` once and no failure, a cancel sends nothing
beyond `started`, a held job sends one `pending`, `notify: false` sends nothing even with a user
default, a training the watchdog finds stalled sends `stalled` then `failed`, and every signed webhook
verifies (and fails with another secret).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from slurmctl.config.locate import find_site_config
from slurmctl.notify.channels import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

from .conftest import REPO, as_user, give, slurmctl, slurmctl_json, start_requeued_now, write_run
from .tracking_services import ENDED, HookReceiver, MailBox, wait_job_state

HOOK_SECRET = "hook-secret-4f2a"
TRAIN_PY = '''"""Steps with slurmctl's runtime; --fail shape|memory at --fail-at; drains and checkpoints."""
import argparse, json, resource, sys, time
from slurmctl.runtime import Runtime

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10)
p.add_argument("--sleep", type=float, default=0.2)
p.add_argument("--fail", choices=["shape", "memory", "hang"])
p.add_argument("--fail-at", type=int, default=1)
a = p.parse_args()
rt = Runtime.from_env()
ck = rt.checkpoints.latest()
save = lambda s: rt.checkpoints.save(s, lambda d: (d / "state.json").write_text(json.dumps({"step": s})))
for step in range(ck.step + 1 if ck else 0, a.steps):
    time.sleep(a.sleep)
    rt.log(step, loss=1.0 / (step + 1))
    if step == a.fail_at and a.fail == "shape":
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x512 and 256x10)")
    if step == a.fail_at and a.fail == "memory":
        size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + 256 * 2**20, resource.RLIM_INFINITY))
        hoard = [bytearray(32 * 2**20) for _ in range(10**6)]  # the host's memory runs out: MemoryError
    if step == a.fail_at and a.fail == "hang":
        time.sleep(3600)  # stuck: no step, no answer to the watchdog's drain request
    if rt.should_stop():
        rt.ack_drain(step, save(step).path)
        sys.exit(0)
    if (step + 1) % rt.checkpoint_interval == 0:
        save(step)
save(a.steps - 1)
'''


@pytest.fixture(scope="module")
def channels():
    mail, hooks = MailBox().start(), HookReceiver().start()
    alice = as_user("alice")
    private = alice.make_dir("notify-secrets")
    secrets = private / "secrets.env"
    secrets.write_text(
        f"EMAIL=mailto://localhost:{mail.port}?smtp=127.0.0.1&from=slurmctl@example.org&to=alice@example.org"
        "&mode=insecure\n"
        f"SLACK=mmost://127.0.0.1:{hooks.port}/slack-token\n"
        f"HOOK=signed+http://127.0.0.1:{hooks.port}/signed?secret={HOOK_SECRET}\n")
    secrets.chmod(0o600)
    give(secrets)
    user_config = private / "config.yaml"
    user_config.write_text(yaml.safe_dump({"notify": {"channels": ["EMAIL", "SLACK", "HOOK"]}}))
    give(user_config)
    folder = Path(f"/tmp/slurmctl-notify-site-{os.getpid()}")
    folder.mkdir(mode=0o755, exist_ok=True)
    site = yaml.safe_load(find_site_config().read_text())
    site["secrets_file"] = str(secrets)
    (folder / "site.yaml").write_text(yaml.safe_dump(site))
    (folder / "site.yaml").chmod(0o644)
    yield {"mail": mail, "hooks": hooks, "site": folder / "site.yaml", "user_config": user_config}
    mail.stop()
    hooks.stop()
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(private, ignore_errors=True)


def alice_env(ch: dict, *, user_default: bool = False) -> dict:
    env = {"SLURMCTL_SITE_CONFIG": str(ch["site"]), "PYTHONPATH": str(REPO)}
    if user_default:
        env["SLURMCTL_USER_CONFIG"] = str(ch["user_config"])
    return env


def submit(workdir: Path, ch: dict, name: str, args: list[str], *, notify=None, user_default=False,
           sbatch: tuple[str, ...] = (), **fields) -> dict:
    spec = {"name": name, "entrypoint": "train.py", "args": args, "partition": "h100-ondemand", "gpus_per_node": 1,
            "time_limit": "5m", "checkpoint": {"interval_steps": 3}, **fields}
    if notify is not None:
        spec["notify"] = notify
    path = write_run(workdir / name, spec, {"train.py": TRAIN_PY})
    return slurmctl_json("submit", path, *(("--", *sbatch) if sbatch else ()),
                         env=alice_env(ch, user_default=user_default))


NOTIFY = {"channels": ["EMAIL", "SLACK", "HOOK"]}


def received(ch: dict, run_id: str) -> dict[str, list[str]]:
    """The events each channel got about `run_id`, in arrival order."""
    def event_of(title: str) -> str:
        for word, event in (("FAILED", "failed"), ("recovered", "recovered"), ("finished", "finished"),
                            ("started", "started"), ("pending", "pending"), ("stalled", "stalled")):
            if word in title:
                return event
        return title
    slack = ch["hooks"].about(run_id, "/hooks/slack-token")
    return {"email": [event_of(str(m["Subject"])) for m in ch["mail"].about(run_id)],
            "slack": [event_of(p["json"]["text"].splitlines()[0]) for p in slack],
            "signed": [p["json"]["event"] for p in ch["hooks"].about(run_id, "/signed")]}


def wait_messages(ch: dict, run_id: str, expected: list[str], timeout: float = 120, settle: float = 8) -> dict:
    """Wait until every channel has `expected` (then `settle` s more, to catch extra messages)."""
    want = {"email": expected, "slack": expected, "signed": expected}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and received(ch, run_id) != want:
        if any(len(v) > len(expected) for v in received(ch, run_id).values()):
            break
        time.sleep(0.5)
    time.sleep(settle)
    got = received(ch, run_id)
    assert got == want, f"{run_id}: expected {expected} on every channel, got {got}"
    return got


def signed_posts(ch: dict, run_id: str) -> list[dict]:
    return ch["hooks"].about(run_id, "/signed")


def end_time(run_dir: str) -> float:
    ends = [e for e in map(json.loads, Path(run_dir, "attempts.jsonl").read_text().splitlines()) if e["event"] == "end"]
    return ends[-1]["time"]


@pytest.mark.parametrize(("fail", "category"), [("shape", "data_shape"), ("memory", "host_oom")])
def test_failure_message_carries_the_diagnosis_within_a_minute(workdir, channels, fail, category):
    run = submit(workdir, channels, f"ntf-{fail}", ["--fail", fail, "--fail-at", "4"], notify=NOTIFY)
    assert wait_job_state(run["job_id"], ENDED, timeout=180) == "FAILED"
    wait_messages(channels, run["run_id"], ["started", "failed"])
    (failure,) = [p for p in signed_posts(channels, run["run_id"]) if p["json"]["event"] == "failed"]
    body = failure["json"]
    assert body["category"] == category, body
    assert body["checkpoint_step"] == 2 and body["next_command"] == f"slurmctl resume {run['run_id']}", body
    assert body["evidence"] and body["cost_usd"] is not None, body
    (mail,) = [m for m in channels["mail"].about(run["run_id"]) if "FAILED" in str(m["Subject"])]
    text = mail.get_body(("plain",)).get_content()
    assert category in text and "Last valid checkpoint: step 2" in text and "Next: slurmctl resume" in text, text
    assert {m["References"] for m in channels["mail"].about(run["run_id"])} == {f"<{run['run_id']}@slurmctl>"}
    delay = float(failure["headers"][TIMESTAMP_HEADER]) - end_time(run["run_dir"])
    print(f"{fail}: failure message {delay:.1f} s after the attempt's end")
    assert delay < 60
    journal = [json.loads(x) for x in Path(run["run_dir"], "notifications.jsonl").read_text().splitlines()]
    assert [r["event"] for r in journal] == ["started", "failed"]
    assert {c["channel"] for r in journal for c in r["channels"]} == {"EMAIL", "SLACK", "HOOK"}
    assert "mailto" not in json.dumps(journal) and HOOK_SECRET not in json.dumps(journal)
    shown = slurmctl_json("status", run["run_id"], env=alice_env(channels))
    assert [n["event"] for n in shown["notifications"]] == ["started", "failed"], shown["notifications"]


def test_a_stalled_training_sends_stalled_then_failed(workdir, channels):
    watchdog = {"SLURMCTL_WATCHDOG_CHECK": "0.5s", "SLURMCTL_WATCHDOG_STALL": "10s",
                "SLURMCTL_WATCHDOG_DRAIN_TIMEOUT": "3s"}
    run = submit(workdir, channels, "ntf-stall", ["--fail", "hang", "--fail-at", "3"], notify=NOTIFY,
                 env=watchdog, checkpoint={"interval_steps": 100})
    assert wait_job_state(run["job_id"], ENDED, timeout=180) == "FAILED"
    wait_messages(channels, run["run_id"], ["started", "stalled", "failed"])
    (stalled,) = [p["json"] for p in signed_posts(channels, run["run_id"]) if p["json"]["event"] == "stalled"]
    assert "no progress" in stalled["detail"], stalled


def test_preempted_run_recovers_with_one_message_and_finishes(workdir, channels):
    run = submit(workdir, channels, "ntf-preempt", ["--steps", "60", "--sleep", "0.2"], notify=NOTIFY,
                 partition="h100-spot", gpus_per_node=8, procs_per_node=1, checkpoint={"interval_steps": 10},
                 sbatch=("--nodelist=h100-3",))
    ck_root = Path(run["run_dir"]) / "checkpoints"
    deadline = time.monotonic() + 180
    while not (ck_root / "latest").exists():
        assert time.monotonic() < deadline, "the spot run never wrote its first checkpoint"
        time.sleep(0.5)
    bob = as_user("bob")
    job = bob.sbatch("-p", "h100-ondemand", "-w", "h100-3", "--gres=gpu:h100:8", "-t", "1", "-J", "ntf-preemptor",
                     "-o", "/dev/null", "--wrap", "sleep 2")
    try:
        start_requeued_now(run["job_id"], timeout=180)
        state = wait_job_state(run["job_id"], ENDED, timeout=240)
    finally:
        bob.scancel(job)
    assert state == "COMPLETED"
    wait_messages(channels, run["run_id"], ["started", "recovered", "finished"])
    recovered = [p["json"] for p in signed_posts(channels, run["run_id"]) if p["json"]["event"] == "recovered"]
    assert recovered[0]["outcome"] == "preemption", recovered


def test_cancel_sends_nothing_beyond_started(workdir, channels):
    run = submit(workdir, channels, "ntf-cancel", ["--steps", "600", "--sleep", "0.5"], notify=NOTIFY)
    wait_messages(channels, run["run_id"], ["started"], settle=0)
    as_user("alice").scancel(run["job_id"])
    wait_job_state(run["job_id"], {"CANCELLED"}, timeout=120)
    wait_messages(channels, run["run_id"], ["started"], settle=15)


def test_a_killed_batch_script_sends_failed_once(workdir, channels):
    """`scancel --batch --signal=KILL`: the batch script dies before `attempt end`, so nothing in the job
    records the end or sends. Root's epilog does, on the batch host: a child as alice records the end
    and starts alice's own sender. The cluster's hooks run the deployed checkout, so this test runs the
    epilog's step of THIS checkout as the epilog would, with the facts Slurm gives it for the real job
    (scontrol's record, the job's exit code); once deployed, the real epilog does the same and the
    journal keeps it to one message."""
    import subprocess

    from slurmctl.ops.hooks import epilog, jobinfo, run_records
    from slurmctl.ops.hooks.config import HookConfig
    from slurmctl.ops.hooks.prolog import HookResult

    run = submit(workdir, channels, "ntf-killed", ["--steps", "600", "--sleep", "0.5"], notify=NOTIFY)
    wait_messages(channels, run["run_id"], ["started"], settle=0)
    alice = as_user("alice")
    alice.run(["scancel", "--batch", "--signal=KILL", str(run["job_id"])], check=True, timeout=60)
    assert wait_job_state(run["job_id"], ENDED, timeout=120) == "FAILED"
    exit_code = subprocess.run(["sacct", "-j", str(run["job_id"]), "-X", "-n", "-P", "-o", "ExitCode"],
                               capture_output=True, text=True, timeout=60).stdout.split()[0]
    cfg = HookConfig.from_env({"SLURMCTL_LOCAL_DIR": os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local")})
    info = jobinfo.query_job(cfg.slurm, run["job_id"])
    cfg.node = info.batch_host
    env = {"SLURM_JOB_ID": str(run["job_id"]), "SLURM_JOB_UID": str(alice.uid), "SLURM_JOB_GID": str(alice.gid),
           "SLURM_JOB_USER": "alice", "SLURM_JOB_COMMENT": f"slurmctl:{run['run_id']}",
           "SLURM_JOB_RESTART_COUNT": "0", "SLURM_JOB_EXIT_CODE2": exit_code, "SLURMD_NODENAME": info.batch_host}
    result, now = HookResult(), time.time()
    run_records.record_killed_attempt(cfg, env, info, epilog.build_record(cfg, env, info, now, result), now, result)
    ends = [e for e in map(json.loads, Path(run["run_dir"], "attempts.jsonl").read_text().splitlines())
            if e["event"] == "end"]
    assert [(e["outcome"], e["recorded_by"], e["exit_code"]) for e in ends] == [("failed", "epilog", 137)], ends
    wait_messages(channels, run["run_id"], ["started", "failed"], timeout=60)
    (failed,) = [p["json"] for p in signed_posts(channels, run["run_id"]) if p["json"]["event"] == "failed"]
    assert "exit code 137" in failed["text"] and "killed (signal 9)" in failed["text"]
    status = slurmctl_json("status", run["run_id"], env=alice_env(channels))
    assert "failed" in json.dumps(status).lower()


def test_held_job_sends_one_pending_message_with_the_reason(workdir, channels):
    run = submit(workdir, channels, "ntf-pending", ["--steps", "3"], notify={**NOTIFY, "pending_after": "3s"},
                 sbatch=("--hold",))
    try:
        wait_messages(channels, run["run_id"], ["pending"], settle=5)
        (post,) = signed_posts(channels, run["run_id"])
        assert post["json"]["reason"] == "JobHeldUser", post["json"]
    finally:
        as_user("alice").scancel(run["job_id"])


def test_user_default_sends_and_notify_false_sends_nothing(workdir, channels):
    quiet = submit(workdir, channels, "ntf-off", ["--steps", "3"], notify=False, user_default=True)
    loud = submit(workdir, channels, "ntf-default", ["--steps", "3"], user_default=True)
    for run in (quiet, loud):
        assert wait_job_state(run["job_id"], ENDED, timeout=180) == "COMPLETED"
    wait_messages(channels, loud["run_id"], ["started", "finished"])
    assert received(channels, quiet["run_id"]) == {"email": [], "slack": [], "signed": []}
    assert not Path(quiet["run_dir"], "notifications.jsonl").exists()
    assert "SLURMCTL_NOTIFY" not in Path(quiet["run_dir"], "job.sbatch").read_text()
    (finished,) = [p["json"] for p in signed_posts(channels, loud["run_id"]) if p["json"]["event"] == "finished"]
    assert set(finished["metrics"]) == {"loss"} and finished["cost_usd"] is not None


def test_every_signed_webhook_verifies(channels):
    posts = [p for p in channels["hooks"].posts if p["path"] == "/signed"]
    assert posts, "the scenarios above sent signed webhooks"
    for post in posts:
        stamp, signature = post["headers"][TIMESTAMP_HEADER], post["headers"][SIGNATURE_HEADER]
        assert verify(HOOK_SECRET, stamp, post["body"], signature, max_age=3600)
        assert not verify("another-secret", stamp, post["body"], signature, max_age=3600)
        assert not verify(HOOK_SECRET, stamp, post["body"] + b" ", signature, max_age=3600)


def test_ls_shows_the_tracked_run_and_channels(channels):
    """ls --json carries each run's notification summary (the runs above)."""
    listed = slurmctl("ls", "--json", env=alice_env(channels)).stdout
    rows = [r for r in json.loads(listed) if (r.get("run_id") or "").startswith("ntf-")]
    assert any(r.get("notified") for r in rows), rows[:3]
