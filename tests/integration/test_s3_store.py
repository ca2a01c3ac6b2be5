"""The local S3 store (deploy/local/s3-up, moto behind deploy/local/s3-server.py), bob against
alice and the operator: a throwaway store on a free port and state dir of its own (the cluster's is not
touched), started by the real s3-up, with alice and bob as its users.

Before: moto ran as root and took any credentials; bob overwrote the dataset shards every user stages
(a same-bytes PUT answered 200), and its control API (/moto-api/: dump, reset, reset-auth) was open."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from .conftest import REPO, as_user
from .throwaway_slurm import free_ports

S3_UP = REPO / "deploy" / "local" / "s3-up"

# Run as a user: every attempt bob makes, with the given keys (or his own profile), as one JSON line.
ATTACK = r"""
import json, sys, urllib.request, urllib.error
import boto3
url, profile, key = sys.argv[1], sys.argv[2], "synthetic/shard-00000.bin"
def client(**kw):
    return boto3.Session(**kw).client("s3", endpoint_url=url, region_name="us-east-1")
out = {}
for who, s3 in (("made-up", client(aws_access_key_id="bob-made-this-up", aws_secret_access_key="nope")),
                ("own", client(profile_name=profile))):
    for what, call in (("list", lambda: s3.list_objects_v2(Bucket="slurmctl-datasets", Prefix="synthetic/")),
                       ("get", lambda: s3.get_object(Bucket="slurmctl-datasets", Key=key)["Body"].read()),
                       ("put", lambda: s3.put_object(Bucket="slurmctl-datasets", Key=key, Body=b"poison")),
                       ("delete", lambda: s3.delete_object(Bucket="slurmctl-datasets", Key=key)),
                       ("create-user", lambda: boto3.Session(profile_name=profile).client(
                           "iam", endpoint_url=url, region_name="us-east-1").create_user(UserName="bob2"))):
        try:
            call()
            out[f"{who} {what}"] = "allowed"
        except Exception as exc:
            out[f"{who} {what}"] = type(exc).__name__
for path in ("/moto-api/data.json", "/moto-api/reset-auth", "/moto-api/reset"):
    try:
        method = "GET" if path.endswith(".json") else "POST"
        with urllib.request.urlopen(urllib.request.Request(url + path, data=None if method == "GET" else b"inf",
                                                           method=method), timeout=10) as r:
            out[path] = r.status
    except urllib.error.HTTPError as exc:
        out[path] = exc.code
print(json.dumps(out))
"""

# alice's job-side read: fsspec with the site's options (profile + endpoint), as the data cache does.
READ = r"""
import sys, fsspec
fs, path = fsspec.core.url_to_fs(sys.argv[2], profile=sys.argv[1], client_kwargs={"endpoint_url": sys.argv[3]})
files = sorted(fs.find(path))
print(len(files), len(fs.cat(files[0])))
"""


@pytest.fixture(scope="module")
def store():
    state = Path(tempfile.mkdtemp(prefix="slurmctl-s3-test-"))
    port = free_ports(1)[0]
    profile = f"slurmctl-test-{uuid.uuid4().hex[:8]}"  # never the cluster's own profile in the users' files
    env = {**os.environ, "SLURMCTL_PYTHON": sys.executable, "SLURMCTL_S3_PROFILE": profile,
           "SLURMCTL_S3_SHARDS": "2"}
    up = subprocess.run([str(S3_UP), str(state), str(port), "alice", "bob"], env=env, capture_output=True,
                        text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield state, f"http://127.0.0.1:{port}", profile, env
    finally:
        subprocess.run([str(S3_UP), "--stop", str(state)], env=env, capture_output=True, timeout=60)
        for user in ("alice", "bob"):  # take the test's profile out of their credentials again
            as_user(user).run([sys.executable, "-c", (
                "import configparser, os, pathlib; p = pathlib.Path.home() / '.aws/credentials'; "
                "c = configparser.ConfigParser(interpolation=None); c.read(p); c.remove_section(os.environ['P']); "
                "f = open(p, 'w'); c.write(f)")], env={"P": profile})
        shutil.rmtree(state, ignore_errors=True)


def test_bob_can_neither_write_the_shared_datasets_nor_reach_the_control_api(store):
    state, url, profile, _ = store
    bob = as_user("bob")
    seen = bob.run([sys.executable, "-c", ATTACK, url, profile], timeout=120)
    assert seen.returncode == 0, seen.stderr
    result = json.loads(seen.stdout)
    assert result["own list"] == result["own get"] == "allowed", result  # his own read-only key reads
    refused = {k: v for k, v in result.items() if k not in ("own list", "own get")}
    assert all(v != "allowed" and v != 200 for v in refused.values()), result
    assert {result[p] for p in ("/moto-api/data.json", "/moto-api/reset-auth", "/moto-api/reset")} == {403}
    # the shard is untouched, and root still has the control API
    alice = as_user("alice")
    read = alice.run([sys.executable, "-c", READ, profile, "s3://slurmctl-datasets/synthetic", url], timeout=120)
    assert read.returncode == 0 and read.stdout.split() == ["2", str(2**20)], read.stdout + read.stderr
    with __import__("urllib.request").request.urlopen(url + "/moto-api/data.json", timeout=10) as answer:
        assert answer.status == 200


def test_the_store_runs_unprivileged_and_its_keys_are_each_owners_alone(store):
    state, url, profile, env = store
    pid = int((state / "moto.pid").read_text())
    uid = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("Uid:")))
    assert uid != 0 and uid == int(subprocess.run(["id", "-u", "slurmctl-s3"], capture_output=True,
                                                   text=True).stdout)
    for secret in ("identities.json", "operator.credentials"):
        st = os.stat(state / secret)
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    bob = as_user("bob")
    assert bob.run(["cat", str(state / "operator.credentials")]).returncode != 0
    assert bob.run(["cat", str(as_user("alice").home / ".aws" / "credentials")]).returncode != 0
    ids = json.loads((state / "identities.json").read_text())
    tracked = subprocess.run(["git", "-C", str(REPO), "grep", "-l", "-F", ids["operator"]["secret"]],
                             capture_output=True, text=True)
    assert tracked.stdout == ""
    again = subprocess.run([str(S3_UP), str(state), url.rsplit(":", 1)[1], "alice", "bob"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "restarting" not in again.stderr, again.stderr  # idempotent
    assert int((state / "moto.pid").read_text()) == pid
