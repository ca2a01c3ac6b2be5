"""bob trickles 100 connections into alice's `slurmctl web` and into the exporter (one byte each every
half second, which no per-read timeout ever cuts); alice's page and a scrape still load at once, bob
holds no more than his share of the connections, and each of his is closed at the whole-request
deadline."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time

from slurmctl.ops.http_limits import MAX_PER_PEER, REQUEST_DEADLINE_SECONDS

from .conftest import ROOT, SLURMCTL, as_user

TRICKLE = r"""
import json, socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Slow: " % port + b"a" * 1000
started = time.monotonic()
conns, connected = [], []
for _ in range(count):
    conns.append(socket.create_connection(("127.0.0.1", port)))
    connected.append(time.monotonic() - started)
for c in conns:
    c.setblocking(False)
closed, position = {}, 0
while time.monotonic() - started < seconds and len(closed) < count:
    for i, c in enumerate(conns):
        if i in closed:
            continue
        try:
            while c.recv(65536):  # an answer (400 for a cut request line) comes before the close
                pass
            closed[i] = time.monotonic() - started - connected[i]
            continue
        except BlockingIOError:
            pass
        except OSError:
            closed[i] = time.monotonic() - started - connected[i]
            continue
        try:
            c.send(request[position:position + 1])
        except BlockingIOError:
            pass
        except OSError:
            closed[i] = time.monotonic() - started - connected[i]
    position += 1
    time.sleep(0.5)
print(json.dumps({"closed": sorted(closed.values()), "open": count - len(closed), "connecting": connected[-1]}))
"""
LOAD = r"""
import http.client, json, sys, time
port, path = int(sys.argv[1]), sys.argv[2]
started = time.monotonic()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
conn.request("GET", path)
first = conn.getresponse()
first.read()
cookie = (first.getheader("Set-Cookie") or "").split(";")[0]
conn.request("GET", first.getheader("Location") or "/", headers={"Cookie": cookie})
page = conn.getresponse()
body = page.read()
print(json.dumps({"token": first.status, "page": page.status, "bytes": len(body),
                  "seconds": time.monotonic() - started}))
"""


def _trickle(bob, port: int):
    """bob's 100 trickling connections, started; (the process) whose JSON says what became of them."""
    seconds = str(REQUEST_DEADLINE_SECONDS + 8)
    return subprocess.Popen(bob.argv([sys.executable, "-c", TRICKLE, str(port), "100", seconds]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _bobs_share_only(attack) -> dict:
    out, err = attack.communicate(timeout=120)
    trickled = json.loads(out or err)
    assert trickled["open"] == 0, trickled  # none outlived the deadline
    # the ones the server took are cut at the deadline; the rest are refused as soon as it accepts them
    held = [t for t in trickled["closed"] if t > REQUEST_DEADLINE_SECONDS / 2]
    assert 0 < len(held) <= MAX_PER_PEER, trickled
    assert max(trickled["closed"]) <= REQUEST_DEADLINE_SECONDS + 2.0, trickled
    return trickled


def test_bob_trickling_100_connections_neither_blocks_alices_page_nor_holds_his_for_long():
    alice, bob = as_user("alice"), as_user("bob")
    web = subprocess.Popen(alice.argv([*SLURMCTL, "web", "--port", "0"]), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, cwd=str(alice.home))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(web.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"http://127\.0\.0\.1:(\d+)(/\?token=\S+)", "".join(lines))):
            assert web.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        port, token_path = int(found.group(1)), found.group(2)

        attack = _trickle(bob, port)
        time.sleep(2.0)  # bob's 100 connections are open and trickling
        loaded = alice.run([sys.executable, "-c", LOAD, str(port), token_path], check=True, timeout=60)
        page = json.loads(loaded.stdout)
        trickled = _bobs_share_only(attack)
        print(f"\nalice's page under bob's 100 trickling connections: {page}; bob's connections closed at "
              f"{trickled['closed'][:3]}... {trickled['closed'][-3:]} s after each connected, still open: "
              f"{trickled['open']}, all 100 connected within {trickled['connecting']:.2f} s")

        assert page["token"] in (302, 303) and page["page"] == 200 and page["seconds"] < 5, page
    finally:
        web.terminate()
        web.wait(timeout=10)


SCRAPE = r"""
import json, sys, time, urllib.request
started = time.monotonic()
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=30).read()
print(json.dumps({"seconds": time.monotonic() - started, "up": b"slurmctl_slurm_up 1.0" in body}))
"""


def test_bob_trickling_100_connections_into_the_exporter_leaves_alices_scrape_alone():
    alice, bob = as_user("alice"), as_user("bob")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    exporter = subprocess.Popen(ROOT.argv([*SLURMCTL, "exporter", "--port", str(port)]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while alice.run([sys.executable, "-c", SCRAPE, str(port)]).returncode != 0:
            assert exporter.poll() is None and time.monotonic() < deadline, "the exporter did not start"
            time.sleep(0.5)
        attack = _trickle(bob, port)
        time.sleep(2.0)
        scrape = json.loads(alice.run([sys.executable, "-c", SCRAPE, str(port)], check=True, timeout=60).stdout)
        trickled = _bobs_share_only(attack)
        print(f"\nalice's scrape under bob's 100 trickling connections: {scrape}; bob's held connections were "
              f"closed {max(trickled['closed']):.1f} s after they connected")
        assert scrape["up"] and scrape["seconds"] < 5, scrape
    finally:
        exporter.terminate()
        exporter.wait(timeout=10)


ATTACK = r"""
import os, resource, signal, socket, sys, time
# bob's attack on a login node's HTTP servers: tens of thousands of idle loopback connections of his own
# (each pair is two lines of /proc/net/tcp) and a connect-then-close loop into the servers' ports
pairs, seconds, ports = int(sys.argv[1]), float(sys.argv[2]), [int(p) for p in sys.argv[3:]]
resource.setrlimit(resource.RLIMIT_NOFILE, (pairs + 512, pairs + 512))
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(4096)
parent = os.getpid()
if os.fork() == 0:
    held = []
    listener.settimeout(1)
    while os.getppid() == parent:
        try:
            held.append(listener.accept()[0])
        except socket.timeout:
            if len(held) >= pairs:
                time.sleep(0.5)
    os._exit(0)
clients = [socket.create_connection(listener.getsockname()) for _ in range(pairs)]
print("inflated", len(clients), flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
started, connects = time.monotonic(), 0
try:
    while time.monotonic() < started + seconds:
        for port in ports:
            try:
                s = socket.socket()
                s.settimeout(2)
                s.connect(("127.0.0.1", port))
                s.close()
                connects += 1
            except OSError:
                pass
finally:
    print("connects per second", round(connects / (time.monotonic() - started)), flush=True)
"""
PAGE = r"""
import http.client, json, sys, time
port, cookie = int(sys.argv[1]), sys.stdin.read().strip()
started = time.monotonic()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
conn.request("GET", "/", headers={"Cookie": cookie})
page = conn.getresponse()
body = page.read()
print(json.dumps({"status": page.status, "bytes": len(body), "seconds": time.monotonic() - started}))
"""
TOKEN = r"""
import http.client, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
conn.request("GET", sys.argv[2])
print((conn.getresponse().getheader("Set-Cookie") or "").split(";")[0])
"""
ATTACK_PAIRS = 12_000  # 24,000 lines of /proc/net/tcp; the cluster's own sockets are a few hundred
SAMPLES = 4


def _alices_latencies(alice, web_port: int, cookie: str, exporter_port: int) -> dict:
    pages, scrapes = [], []
    for _ in range(SAMPLES):
        page = alice.run([sys.executable, "-c", PAGE, str(web_port)], input=cookie, timeout=120)
        pages.append(json.loads(page.stdout)["seconds"] if page.returncode == 0 and '"status": 200' in page.stdout
                     else float("inf"))
        scrape = alice.run([sys.executable, "-c", SCRAPE, str(exporter_port)], timeout=120)
        scrapes.append(json.loads(scrape.stdout)["seconds"] if scrape.returncode == 0 and '"up": true' in scrape.stdout
                       else float("inf"))
    return {"page": sorted(pages), "scrape": sorted(scrapes)}


def test_bobs_connect_and_close_flood_with_a_huge_socket_table_leaves_alices_page_and_scrape_fast():
    """The servers tell loopback users apart by asking the kernel about the one client socket
    (sock_diag), so neither the size of the machine's socket table nor a stream of connections that
    close before they are accepted slows the accept loop that alice's request waits behind."""
    alice, bob = as_user("alice"), as_user("bob")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        exporter_port = probe.getsockname()[1]
    exporter = subprocess.Popen(ROOT.argv([*SLURMCTL, "exporter", "--port", str(exporter_port)]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    web = subprocess.Popen(alice.argv([*SLURMCTL, "web", "--port", "0"]), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, cwd=str(alice.home))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(web.stdout), daemon=True).start()
    attack = None
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"http://127\.0\.0\.1:(\d+)(/\?token=\S+)", "".join(lines))):
            assert web.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        web_port, token_path = int(found.group(1)), found.group(2)
        while alice.run([sys.executable, "-c", SCRAPE, str(exporter_port)]).returncode != 0:
            assert exporter.poll() is None and time.monotonic() < deadline, "the exporter did not start"
            time.sleep(0.5)
        cookie = alice.run([sys.executable, "-c", TOKEN, str(web_port), token_path], check=True).stdout.strip()
        assert cookie, "the token gave no cookie"

        normal = _alices_latencies(alice, web_port, cookie, exporter_port)
        attack = subprocess.Popen(bob.argv([sys.executable, "-c", ATTACK, str(ATTACK_PAIRS), "40",
                                            str(web_port), str(exporter_port)]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert attack.stdout.readline().startswith("inflated"), attack.stderr.read()
        time.sleep(2.0)  # the flood is running
        with open("/proc/net/tcp", "rb") as table:
            table_lines = table.read().count(b"\n")
        attacked = _alices_latencies(alice, web_port, cookie, exporter_port)
        attack.terminate()  # runuser passes it on to bob's process
        flood = attack.communicate(timeout=60)[0].strip()
        median = {k: {"normal": normal[k][SAMPLES // 2], "attacked": attacked[k][SAMPLES // 2]} for k in normal}
        print(f"\n/proc/net/tcp lines under attack: {table_lines}, bob's {flood}; alice's latencies (s), "
              f"sorted, normal vs under bob's flood: page {normal['page']} vs {attacked['page']}, "
              f"scrape {normal['scrape']} vs {attacked['scrape']}; medians {median}")

        assert table_lines > 2 * ATTACK_PAIRS, table_lines
        # every request answered, and none slowed past a couple of seconds on this shared 2-core machine
        assert max(attacked["page"]) < 3.0 and max(attacked["scrape"]) < 3.0, attacked
    finally:
        if attack is not None and attack.poll() is None:
            attack.kill()
            attack.wait(timeout=30)
        for server in (web, exporter):
            server.terminate()
            server.wait(timeout=10)
