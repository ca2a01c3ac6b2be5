"""`slurmctl web` in-process: the token/cookie/CSRF gate, a user's runs only, escaping of every value,
the pages and JSON routes over run dirs in a temporary runs root and Slurm output replayed from the
real cluster; and the real server on a socket (tests/integration/test_web_browser.py drives it in a
browser on the real cluster)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmctl.config.models import load_site_config
from slurmctl.rundir import RunRegistry, new_run_id
from slurmctl.slurm.client import SlurmClient
from slurmctl.web.app import WebApp
from slurmctl.web.auth import COOKIE, Sessions
from slurmctl.web.server import make_server

from .fakes import ReplayRunner

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "<script>alert(1)</script>"


def make_run(registry: RunRegistry, name: str, job_id: int | None = None, metrics: list[dict] = (),
             log: str = "") -> str:
    run_id = new_run_id(name)
    path = registry.root / run_id
    (path / "logs").mkdir(parents=True)
    (path / "checkpoints").mkdir()
    (path / "run.json").write_text(json.dumps({"name": name, "created": time.time()}))
    (path / "run.yaml").write_text("name: x\nentrypoint: train.py\npartition: h100-ondemand\ngpus_per_node: 1\n"
                                   "time_limit: 1h\n")
    events = [{"event": "submitted", "job_id": job_id, "time": time.time()}] if job_id else []
    if job_id:
        events.append({"event": "start", "job_id": job_id, "restart_count": 0, "time": 1000.0, "nodes": "h100-1"})
        (path / "logs" / f"{job_id}.out").write_text(log)
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return run_id


@pytest.fixture
def web(tmp_path):
    (tmp_path / "runs").mkdir()
    registry = RunRegistry(tmp_path / "runs")
    registry.user_dir(create=True)
    runner = ReplayRunner({"squeue": "", "sacct": ""})
    ctx = SimpleNamespace(registry=registry, client=SlurmClient(runner),
                          site=load_site_config(REPO / "deploy" / "local" / "site.yaml"))
    sessions = Sessions("the-token")
    app = WebApp(ctx, sessions, cancel_timeout=2)
    response = app.handle("GET", "/?token=the-token", {})
    cookie = response.headers["Set-Cookie"].split(";")[0]
    return SimpleNamespace(app=app, registry=registry, cookie=cookie, runner=runner, sessions=sessions,
                           get=lambda target: app.handle("GET", target, {"Cookie": cookie}))


def test_the_token_works_once_then_only_the_session_cookie_opens_pages(tmp_path):
    registry = RunRegistry(tmp_path)
    ctx = SimpleNamespace(registry=registry, client=SlurmClient(ReplayRunner({"squeue": ""})), site=None)
    app = WebApp(ctx, Sessions("tok"))
    assert app.handle("GET", "/", {}).status == 403
    assert app.handle("GET", "/?token=wrong", {}).status == 403
    first = app.handle("GET", "/queue?token=tok&user=bob", {})
    assert first.status == 303 and first.headers["Location"] == "/queue?user=bob"
    cookie = first.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert app.handle("GET", "/?token=tok", {}).status == 403  # spent
    session = cookie.split(";")[0]
    assert app.handle("GET", "/queue", {"Cookie": session}).status == 200
    assert app.handle("GET", "/queue", {"Cookie": f"{COOKIE}=forged"}).status == 403
    assert app.handle("GET", "/queue", {"Cookie": "garbage;;=\x00"}).status == 403


def test_runs_page_lists_filters_sorts_and_escapes(web):
    a = make_run(web.registry, "alpha", metrics=[{"step": 3, "time": 1.0, "loss": 1.0}])
    b = make_run(web.registry, "beta")
    page = web.get("/").body.decode()
    assert a in page and b in page and f'href="/run/{a}"' in page
    filtered = web.get("/?q=alph").body.decode()
    assert a in filtered and b not in filtered
    rows = json.loads(web.get("/?format=json&sort=run&order=asc").body)
    assert [r["run_id"] for r in rows] == [a, b] and rows[0]["phase"] == "not submitted"
    searched = web.get("/?q=" + HOSTILE.replace("<", "%3C").replace(">", "%3E")).body.decode()
    assert HOSTILE not in searched and "&lt;script&gt;" in searched


def test_runs_page_lists_the_callers_plain_sbatch_jobs_as_ls_does(web):
    import pwd

    from .fakes import sacct_output

    me = pwd.getpwuid(web.registry.uid).pw_name
    def ended(job_id, state, end, user, name, comment):  # the fields of status's sacct (client.HISTORY)
        return [job_id, state, "None", "l4-dev", 1, "l4-1", 61, "5:00", "2026-12-01T09:00:00", "2026-12-01T09:59:00",
                end, "1:0", "cpu=1,node=1", user, name, comment]

    web.runner.outputs["sacct"] = sacct_output(
        ended(4242, "FAILED", "2026-12-01T10:00:00", me, HOSTILE, ""),
        ended(4243, "COMPLETED", "2026-12-01T11:00:00", "someone-else", "theirs", ""),
        ended(4244, "COMPLETED", "2026-12-01T12:00:00", me, "a-run", "slurmctl:a-run-20261201-abcd"))
    page = web.get("/").body.decode()
    assert 'id="plain-jobs"' in page and "slurmctl status 4242" in page and "&lt;script&gt;" in page
    assert HOSTILE not in page and "4243" not in page and "4244" not in page  # another user's; a run's job


def test_run_page_story_charts_log_by_rank_and_escaped_metrics(web):
    log = "slurmctl: attempt 0 of job 77 starting on h100-1\n[rank0]: step 1 " + HOSTILE + "\n[rank1]: other rank\n"
    metrics = [{"step": s, "time": 1000.0 + s, "loss": 4.0 / (s + 1), HOSTILE: 1.0} for s in range(20)]
    run_id = make_run(web.registry, "gamma", 77, metrics, log)
    page = web.get(f"/run/{run_id}")
    text = page.body.decode()
    assert page.status == 200 and run_id in text
    assert f'src="/run/{run_id}/chart/loss.svg"' in text and "attempt 1 (job 77)" in text
    svg = web.get(f"/run/{run_id}/chart/loss.svg")
    assert svg.content_type == "image/svg+xml" and b"<svg" in svg.body and b"(log scale)" in svg.body
    tail = json.loads(web.get(f"/run/{run_id}/log?rank=0").body)
    assert "[rank1]: other rank" not in tail["lines"] and any(HOSTILE in line for line in tail["lines"])
    every = json.loads(web.get(f"/run/{run_id}/log?rank=all").body)
    assert "[rank1]: other rank" in every["lines"]
    assert web.get(f"/run/{run_id}/log?rank=x;rm").status == 400
    compared = web.get(f"/compare?run={run_id}").body.decode()
    assert HOSTILE not in compared and "&lt;script&gt;" in compared  # a metric name from metrics.jsonl
    assert web.get(f"/compare/chart.svg?run={run_id}").body.startswith(b"<?xml")


def test_only_the_callers_run_ids_and_never_paths(web, tmp_path):
    other = RunRegistry(tmp_path / "runs", "someone-else")
    other.root.mkdir()
    foreign = make_run(other, "theirs")
    assert web.get(f"/run/{foreign}").status == 404
    assert web.get(f"/run/{foreign}/log").status == 404
    for ref in ("..", "%2e%2e", "..%2F..%2Fetc", "/etc/passwd"):
        assert web.get(f"/run/{ref}").status == 404
    assert web.get("/static/../app.py").status == 404
    assert web.get("/static/app.css").status == 200
    assert web.get("/showback").status == 403  # the operator's page


def test_cancel_needs_the_forms_csrf_value_and_reports_a_run_without_a_job(web):
    run_id = make_run(web.registry, "delta", 55)
    confirm = web.get(f"/run/{run_id}/cancel").body.decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', confirm).group(1)
    headers = {"Cookie": web.cookie}
    assert web.app.handle("POST", f"/run/{run_id}/cancel", headers, b"csrf=wrong").status == 403
    assert web.app.handle("POST", f"/run/{run_id}/cancel", headers, b"").status == 403
    started = web.app.handle("POST", f"/run/{run_id}/cancel", headers, f"csrf={csrf}".encode())
    assert started.status == 303 and started.headers["Location"] == f"/run/{run_id}#cancel"
    deadline = time.monotonic() + 10
    while (state := json.loads(web.get(f"/run/{run_id}/cancel.json").body))["state"] == "draining":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Slurm (replayed: empty squeue and sacct) no longer knows job 55: the cancel verifies it is gone
    assert state["state"] == "done" and state["message"] == "job 55 was not running: cancelled", state
    assert not [c for c in web.runner.calls if c[0] == "scancel"]  # nothing to stop: no scancel
    events = (web.registry.root / run_id / "attempts.jsonl").read_text()
    assert '"cancel-requested"' in events  # control/cancel did it, as `slurmctl cancel` would


def test_operator_view_is_read_only_with_showback_from_the_ledger(web, tmp_path):
    from datetime import datetime, timedelta

    from slurmctl.ops.accounting import Attempt, Ledger

    web.app.operator = True
    run_id = make_run(web.registry, "epsilon", 12)
    owner = web.registry.user
    assert web.get(f"/run/{run_id}").status == 404  # the operator names the owner
    page = web.get(f"/run/{run_id}?user={owner}")
    assert page.status == 200 and "cancel-button" not in page.body.decode()
    assert web.get(f"/run/{run_id}/cancel?user={owner}").status == 403
    ledger_path = tmp_path / "ledger.sqlite"
    web.app.ctx.site.accounting.ledger_path = str(ledger_path)
    assert "No cost ledger" in web.get("/showback").body.decode()
    assert web.get("/showback/chart.svg").status == 404
    ledger = Ledger(ledger_path)
    day = datetime.now().replace(microsecond=0) - timedelta(days=1)
    ledger.upsert([Attempt("c", i, (day + timedelta(hours=i)).isoformat(), (day + timedelta(hours=i + 1)).isoformat(),
                           day.isoformat(), "r", "r", user, account, "h100", "h100", 8, 1, 3600, 7200, "COMPLETED",
                           "0:0", 60, 8.0, 20.0 * (i + 1), waste_usd=1.5, waste_cause=HOSTILE)
                   for i, (user, account) in enumerate([("alice", "vision"), ("carol", "nlp")])])
    ledger.db.close()
    page = web.get("/showback?by=account&days=3").body.decode()
    assert "vision" in page and "nlp" in page and "$60.00" in page  # the total of both attempts
    assert HOSTILE not in page and "&lt;script&gt;" in page  # a waste cause from the ledger, escaped
    chart = web.get("/showback/chart.svg?by=user&days=3")
    assert chart.status == 200 and b"cost per day by user" in chart.body and b"carol" in chart.body


def test_the_real_server_sets_safety_headers_and_checks_the_host(web):
    server = make_server(web.app, "127.0.0.1", 0)
    port = server.server_address[1]
    # the cookie is named after the port: another server on this host (bob's, the operator's) has its own
    assert web.sessions.cookie_name == f"{COOKIE}_{port}"
    cookie = f"{COOKIE}_{port}={web.cookie.split('=', 1)[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert web.app.handle("GET", "/queue", {"Cookie": web.cookie}).status == 403
        request = urllib.request.Request(f"http://127.0.0.1:{port}/queue", headers={"Cookie": cookie})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
            assert "script-src 'self'" in response.headers["Content-Security-Policy"]
            assert response.headers["Referrer-Policy"] == "no-referrer"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/queue", timeout=10)
        assert refused.value.code == 403
        rebound = urllib.request.Request(f"http://127.0.0.1:{port}/queue",
                                         headers={"Cookie": cookie, "Host": "evil.example:80"})
        with pytest.raises(urllib.error.HTTPError) as wrong_host:
            urllib.request.urlopen(rebound, timeout=10)
        assert wrong_host.value.code == 403
    finally:
        server.shutdown()
        server.server_close()


def test_the_command_prints_the_tunnel_and_a_token_url_and_refuses_a_busy_port(web, tmp_path):
    import os
    import socket
    import subprocess
    import sys

    import yaml

    site = yaml.safe_load((REPO / "deploy" / "local" / "site.yaml").read_text())
    (tmp_path / "site.yaml").write_text(yaml.safe_dump({**site, "runs_root": str(tmp_path / "runs")}))
    env = {**os.environ, "SLURMCTL_SITE_CONFIG": str(tmp_path / "site.yaml")}
    proc = subprocess.Popen([sys.executable, "-m", "slurmctl.cli", "web", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline() for _ in range(5)]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    port = int(re.search(r"on 127\.0\.0\.1:(\d+)", lines[0]).group(1))
    assert re.fullmatch(rf"\s+ssh -N -L {port}:127\.0\.0\.1:{port} \S+@\S+\n", lines[2]), lines
    assert re.fullmatch(rf"\s+http://127\.0\.0\.1:{port}/\?token=[A-Za-z0-9_-]{{40,}}\n", lines[4]), lines
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "slurmctl.cli", "web", "--port", str(taken)], capture_output=True,
                              text=True, env=env, timeout=60)
    assert done.returncode != 0 and f"cannot listen on 127.0.0.1:{taken}" in done.stderr
    assert "Traceback" not in done.stderr


def test_runs_and_queue_pages_ask_slurm_exactly_what_ls_and_queue_ask(tmp_path):
    """The pages read through the CLI's core: the same argv, the same number of Slurm commands."""
    from click.testing import CliRunner

    from slurmctl.cli.context import Context
    from slurmctl.cli.observe import list_runs, queue

    site = load_site_config(REPO / "deploy" / "local" / "site.yaml").model_copy(update={"runs_root": str(tmp_path)})
    registry = RunRegistry(tmp_path)
    registry.user_dir(create=True)
    for n, job_id in enumerate((101, 102)):
        make_run(registry, f"run{n}", job_id)

    def calls(action) -> list[list[str]]:
        ctx = Context()
        ctx._site, ctx._client = site, SlurmClient(ReplayRunner({"squeue": "", "sacct": ""}))
        action(ctx)
        return ctx._client.runner.calls

    def page(path):
        def open_page(ctx):
            app = WebApp(ctx, Sessions("t"))
            cookie = app.handle("GET", "/?token=t", {}).headers["Set-Cookie"].split(";")[0]
            assert app.handle("GET", path, {"Cookie": cookie}).status == 200
        return open_page

    def cli(command, args):
        return lambda ctx: CliRunner().invoke(command, args, obj=ctx, catch_exceptions=False)

    web_ls, cli_ls = calls(page("/?n=20")), calls(cli(list_runs, ["-n", "20"]))
    # both list the caller's plain sbatch jobs beside the runs (squeue --me, the last days from one sacct,
    # which also has the runs' ended jobs: a sacct -j only for those it does not have)
    assert web_ls == cli_ls and [c[0] for c in web_ls] == ["squeue", "squeue", "squeue", "sacct", "sacct"], web_ls
    assert calls(page("/queue")) == calls(cli(queue, [])) == [calls(cli(queue, []))[0]]


def test_run_page_links_the_tracked_run_and_lists_where_messages_went(web):
    run_id = make_run(web.registry, "tracked", 78)
    path = web.registry.root / run_id
    meta = json.loads((path / "run.json").read_text())
    meta["tracking"] = {"backend": "mlflow", "run_id": "abc123", "url": "http://127.0.0.1:5050/#/experiments/1/runs/abc123"}
    (path / "run.json").write_text(json.dumps(meta))
    (path / "notifications.jsonl").write_text(json.dumps({
        "event": "failed", "time": 1.0, "key": "failed:78:0", "title": HOSTILE, "sent": True,
        "channels": [{"channel": "EMAIL", "kind": "email", "error": None},
                     {"channel": "HOOK", "kind": "signed-webhook", "error": "HTTP 500 " + HOSTILE}]}) + "\n")
    text = web.get(f"/run/{run_id}").body.decode()
    assert '<a href="http://127.0.0.1:5050/#/experiments/1/runs/abc123" rel="noopener">abc123</a>' in text
    assert "failed: sent to EMAIL (email)" in text and "HOOK: HTTP 500 &lt;script&gt;" in text
    assert HOSTILE not in text
    meta["tracking"]["url"] = "javascript:alert(1)"  # only http(s) becomes a link
    (path / "run.json").write_text(json.dumps(meta))
    assert "javascript:" not in web.get(f"/run/{run_id}").body.decode()


def _bounded_server(tmp_path, monkeypatch, *, at_once: int, per_peer: int, deadline: float):
    from slurmctl.web import server as server_module

    monkeypatch.setattr(server_module._Server, "max_connections", at_once)
    monkeypatch.setattr(server_module._Server, "max_per_peer", per_peer)
    monkeypatch.setattr(server_module._Server, "request_deadline", deadline)
    ctx = SimpleNamespace(registry=RunRegistry(tmp_path), client=SlurmClient(ReplayRunner({"squeue": ""})), site=None)
    server = make_server(WebApp(ctx, Sessions("tok")), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _still_served(port: int) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:  # served: 403 without the token
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    assert refused.value.code == 403


def test_stalled_connections_get_no_thread_past_the_cap_and_are_dropped_after_the_deadline(tmp_path, monkeypatch):
    """Anyone on the login node can connect: 200 connections that never send a request cost at most
    max_connections threads, and each is closed at the request deadline; a real request then still works."""
    import socket

    server = _bounded_server(tmp_path, monkeypatch, at_once=8, per_peer=1000, deadline=1.0)
    port = server.server_address[1]
    before = threading.active_count()
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    try:
        most, until = 0, time.monotonic() + 2.5
        while time.monotonic() < until:  # the cap holds all along, while the deadline frees and refills slots
            most = max(most, threading.active_count() - before)
            time.sleep(0.05)
        assert most <= 8 + 1  # + the deadline reaper
        cut = 0
        for sock in stalled:  # the server closed the ones it took at the deadline, and refused the rest
            sock.setblocking(False)
            try:
                cut += sock.recv(1) == b""
            except BlockingIOError:
                pass
        assert cut >= 8, cut
        for sock in stalled:
            sock.close()
        time.sleep(1.5)  # the slots still held by stalled ones come free at their deadline
        _still_served(port)
    finally:
        for sock in stalled:
            sock.close()
        server.shutdown()
        server.server_close()


def test_a_trickling_client_is_cut_at_the_whole_request_deadline_not_per_read(tmp_path, monkeypatch):
    """One byte of a request every 0.2 s never trips a 20 s per-read timeout; the whole request has
    1 s here, so the server closes the connection after about 1 s."""
    import socket

    server = _bounded_server(tmp_path, monkeypatch, at_once=8, per_peer=8, deadline=1.0)
    port = server.server_address[1]
    sock = socket.create_connection(("127.0.0.1", port))
    started = time.monotonic()
    closed_after = None
    try:
        for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            time.sleep(0.2)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    closed_after = time.monotonic() - started
                    break
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
        assert closed_after is not None and 0.9 <= closed_after <= 3.0, closed_after
        _still_served(port)
    finally:
        sock.close()
        server.shutdown()
        server.server_close()


def test_runs_page_cost_is_every_attempts_as_slurmctl_cost_says(web, monkeypatch):
    from .fakes import pin_seal, sacct_output

    captured = json.loads((REPO / "tests" / "fixtures" / "slurm" / "requeued_plain_job_attempts.json").read_text())
    pin_seal(monkeypatch, captured["seal"])
    run_id = make_run(web.registry, "requeued", 4226)
    with open(web.registry.root / run_id / "attempts.jsonl", "a") as events:  # Slurm requeued it once
        events.write(json.dumps({"event": "start", "job_id": 4226, "restart_count": 1, "time": 2000.0}) + "\n")
    # status reads the newest attempt (sacct, as captured: 172 s of 4 H100s on h100-spot) ...
    web.runner.outputs["sacct"] = sacct_output(
        [4226, "CANCELLED by 1001", "None", "h100-spot", 2, "h100-[1-2]", 172, "10:00", "2026-12-01T23:20:07",
         "2026-12-01T23:22:51", "2026-12-01T23:25:43", "0:0", "billing=2,cpu=2,gres/gpu:h100=4,gres/gpu=4,node=2",
         "alice", run_id, f"slurmctl:{run_id}"], seal=captured["seal"])
    # ... and `slurmctl cost` every attempt of it (sacct --duplicates, captured from the real cluster)
    web.runner.outputs[tuple(captured["call"]["argv"])] = captured["call"]["stdout"]
    from slurmctl.ops.accounting import run_attempts

    attempts = run_attempts(web.app.ctx.site, web.app.ctx.client, [4226])
    total = sum(a.cost_usd for a in attempts)
    assert len(attempts) == 2 and round(total, 2) == 0.26 and round(attempts[-1].cost_usd, 2) < 0.26
    rows = {r["run_id"]: r for r in json.loads(web.get("/?format=json").body)}
    assert rows[run_id]["cost"] == f"${total:,.2f}" and abs(rows[run_id]["cost_value"] - total) < 1e-9
    assert f"${total:,.2f}" in web.get("/").body.decode()
