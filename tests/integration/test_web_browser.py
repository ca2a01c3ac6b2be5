"""`slurmctl web` in a real browser (Debian's chromium, headless, through chromium-driver) on the real
cluster: alice starts the server and a tiny CPU training; the journey opens Runs, clicks into the
run, sees the charts and the story, follows the log, cancels with confirmation and sees the drain
acknowledged. Without the token, or from bob's server, alice's run is 403/404; the operator's (root)
server shows it read-only. Screenshots of every
page go to $SLURMCTL_WEB_SCREENS (default /tmp/slurmctl-web-screens).
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .conftest import ROOT, SLURMCTL, User, slurmctl_json, write_run

SCREENS = Path(os.environ.get("SLURMCTL_WEB_SCREENS", "/tmp/slurmctl-web-screens"))
TRAIN = '''"""A tiny training: a falling loss and a throughput each step, a checkpoint every 10 steps."""
import json, math, sys, time
from slurmctl.runtime import Runtime

rt = Runtime.from_env()
ck = rt.checkpoints.latest()
for step in range(ck.step + 1 if ck else 0, 100000):
    time.sleep(0.1)
    loss = 3.0 * math.exp(-step / 15) + 0.05
    rt.log(step, loss=loss, samples_per_s=640 + 20 * math.sin(step))
    print(f"step {step} loss {loss:.4f}", flush=True)
    if rt.should_stop():
        saved = rt.checkpoints.save(step, lambda d: (d / "state.json").write_text(json.dumps({"step": step})))
        rt.ack_drain(step, saved.path)
        print(f"drained at step {step}", flush=True)
        sys.exit(0)
    if (step + 1) % 10 == 0:
        rt.checkpoints.save(step, lambda d: (d / "state.json").write_text(json.dumps({"step": step})))
'''

pytestmark = pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                                reason="chromium and chromium-driver are in deploy/local/apt-extras.txt")


class WebServer:
    """`slurmctl web --port 0` as a cluster user; the printed URL carries the one-time token."""

    def __init__(self, user: User):
        self.proc = subprocess.Popen(user.argv([*SLURMCTL, "web", "--port", "0"]), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, cwd=str(user.home))
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()
        deadline = time.monotonic() + 30
        while "?token=" not in (printed := "".join(self.lines)):
            assert self.proc.poll() is None and time.monotonic() < deadline, f"web did not start: {printed}"
            time.sleep(0.1)
        self.printed = printed
        self.url = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", self.printed).group(0)
        self.base = self.url.split("/?")[0]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _status(opener, url: str) -> int:
    try:
        with opener.open(url, timeout=15) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1500"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")


def test_journey_runs_run_charts_story_log_cancel_in_chromium(alice, bob, workdir):
    from selenium.webdriver.common.by import By

    SCREENS.mkdir(parents=True, exist_ok=True)
    # no GPU: the account's GPU limit may be taken by other runs of alice's; a CPU training shows the same pages
    spec = {"name": "web-journey", "entrypoint": "train.py", "partition": "l4-dev", "gpus_per_node": 0,
            "time_limit": "5m", "checkpoint": {"interval_steps": 10},
            # torchrun --tee copies the worker's lines through its own stdout, block-buffered into the
            # log file unless Python is unbuffered: without this the log shows them only at the end
            "env": {"PYTHONUNBUFFERED": "1"}}
    run = slurmctl_json("submit", write_run(workdir / "web-journey", spec, {"train.py": TRAIN}))
    run_id, metrics = run["run_id"], Path(run["run_dir"]) / "metrics.jsonl"
    servers, driver = [], None
    try:
        for user in (alice, bob, ROOT):
            servers.append(WebServer(user))
        alice_web, bob_web, root_web = servers
        # Access: no token, a spent token, bob's own session: alice's run stays closed.
        anonymous = urllib.request.build_opener()
        assert _status(anonymous, f"{alice_web.base}/run/{run_id}") == 403
        assert _status(anonymous, f"{alice_web.base}/run/{run_id}/log?rank=0") == 403
        bob_opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        assert _status(bob_opener, bob_web.url) == 200  # token spent for a cookie, redirected to bob's runs
        assert _status(bob_opener, f"{bob_web.base}/run/{run_id}") == 404
        assert _status(bob_opener, f"{bob_web.base}/run/{run_id}/log?rank=0") == 404
        assert _status(bob_opener, f"{bob_web.base}/run/{run_id}/chart/loss.svg") == 404
        assert _status(bob_opener, bob_web.url) == 403  # the token works once

        _wait(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 25, 120,
              lambda: f"25 training steps (squeue: {alice.squeue('-h', '-j', str(run['job_id']), '-o', '%T %r')})")
        driver = _browser()
        driver.get(alice_web.url)
        link = _wait(lambda: driver.find_elements(By.LINK_TEXT, run_id), 20, "the run on the Runs page")[0]
        driver.save_screenshot(str(SCREENS / "runs.png"))
        link.click()
        _wait(lambda: driver.current_url.endswith(f"/run/{run_id}"), 20, "the Run page")
        assert driver.find_element(By.ID, "phase").text in {"training", "checkpointing"}
        assert "attempt 1 (job" in driver.find_element(By.ID, "history").text
        for chart in ("chart-loss", "chart-throughput"):  # an <img> whose SVG loaded and drew
            _wait(lambda c=chart: driver.execute_script(
                f"return document.getElementById('{c}').naturalWidth") > 300, 20, chart)
        svg = _status(urllib.request.build_opener(), f"{alice_web.base}/run/{run_id}/chart/loss.svg")
        assert svg == 403  # charts too need the session
        first = _wait(lambda: re.findall(r"step (\d+) loss", driver.find_element(By.ID, "log-tail").text), 20, "log")
        later = _wait(lambda: [s for s in re.findall(r"step (\d+) loss", driver.find_element(By.ID, "log-tail").text)
                               if int(s) > int(first[-1]) + 5], 20, "the log to follow new steps")
        assert later
        driver.save_screenshot(str(SCREENS / "run.png"))

        driver.find_element(By.ID, "cancel-button").click()
        _wait(lambda: driver.find_elements(By.ID, "confirm-cancel"), 10, "the confirmation")
        driver.save_screenshot(str(SCREENS / "cancel-confirm.png"))
        driver.find_element(By.ID, "confirm-cancel").click()
        status = _wait(lambda: driver.find_elements(By.ID, "cancel-status"), 10, "the cancel status")[0]
        _wait(lambda: "drain acknowledged at step" in status.text, 60, f"the drain ACK ({status.text!r})")
        assert status.get_attribute("data-state") == "done" and "stopped (Slurm: " in status.text
        driver.save_screenshot(str(SCREENS / "run-cancelled.png"))
        ack_step = int(re.search(r"acknowledged at step (\d+)", status.text).group(1))
        assert (Path(run["run_dir"]) / "checkpoints" / f"checkpoint-{ack_step}" / ".complete").is_file()

        driver.find_element(By.ID, "nav-queue").click()
        _wait(lambda: driver.find_elements(By.ID, "queue"), 10, "the Queue page")
        driver.save_screenshot(str(SCREENS / "queue.png"))
        driver.get(f"{alice_web.base}/compare?run={run_id}")
        _wait(lambda: driver.execute_script("return document.getElementById('compare-chart').naturalWidth") > 300,
              20, "the compare chart")
        assert run_id in driver.find_element(By.ID, "finals").text
        driver.save_screenshot(str(SCREENS / "compare.png"))

        # The operator (root) in the same browser (its cookie is named after its port): every user's
        # runs, alice's read-only (no cancel button, the cancel page refused), and showback.
        driver.get(root_web.url)
        _wait(lambda: driver.find_elements(By.LINK_TEXT, run_id), 20, "alice's run on the operator's page")[0].click()
        _wait(lambda: driver.current_url.endswith(f"/run/{run_id}?user=alice"), 20, "the operator's Run page")
        assert not driver.find_elements(By.ID, "cancel-button") and driver.find_elements(By.ID, "history")
        driver.get(f"{root_web.base}/run/{run_id}/cancel?user=alice")
        assert "read-only" in driver.find_element(By.ID, "error-message").text
        driver.find_element(By.ID, "nav-showback").click()
        _wait(lambda: "Showback" in driver.find_element(By.TAG_NAME, "h1").text, 20, "the Showback page")
        driver.save_screenshot(str(SCREENS / "showback.png"))
        driver.get(f"{alice_web.base}/queue")  # alice's session survived the operator's login
        assert driver.find_elements(By.ID, "queue")
    finally:
        if driver is not None:
            driver.save_screenshot(str(SCREENS / "last.png"))  # where the journey ended, also on a failure
            print(driver.find_element(By.TAG_NAME, "body").text[-3000:])
            driver.quit()
        for server in servers:
            server.stop()
        alice.scancel(run["job_id"])
