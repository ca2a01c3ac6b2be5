"""The local S3 store (moto's server) with real identities, for deploy/local/s3-up.

    s3-server.py --host 127.0.0.1 --port 5070 --bucket slurmctl-datasets <IDENTITIES_JSON_ON_STDIN

Every user of the machine reaches the port, so moto's own IAM enforcement is on from the first
request (INITIAL_NO_AUTH_ACTION_COUNT=0): a request must be signed with a key this server knows, and
the key's policy must allow the action. The keys come on stdin, from root's 0600 file (this process
runs as its own unprivileged account and cannot read it), as {"operator": {"key", "secret"},
"readers": {USER: {"key", "secret"}}}:
- the operator may do anything in S3 (s3-up and deploy/local/s3_shards.py load the shards with it);
- each reader (one per cluster user, in the user's own ~/.aws/credentials) may list and read BUCKET.
The keys are made by s3-up with `secrets`, not by moto (whose generator is not meant for secrets).

moto's control API (/moto-api/: a dump of every object, reset, reset-auth, which turns the
enforcement off, recorder replay) and every non-S3 service are served to root alone: the kernel says
who owns the client's socket (slurmctl.sockowner.peer_uid).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"  # read by moto.settings at import: set it first

from moto.core.models import DEFAULT_ACCOUNT_ID  # noqa: E402
from moto.iam.models import iam_backends  # noqa: E402
from moto.moto_server.werkzeug_app import (  # noqa: E402
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple  # noqa: E402

from slurmctl.sockowner import peer_uid  # noqa: E402

READ_ACTIONS = ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"]


def _policy(actions: list[str], resources: list[str]) -> str:
    return json.dumps({"Version": "2012-10-17",
                       "Statement": [{"Effect": "Allow", "Action": actions, "Resource": resources}]})


def load_identities(identities: dict, bucket: str) -> None:
    """One IAM user per identity, with the given key as its only access key."""
    iam = iam_backends[DEFAULT_ACCOUNT_ID]["global"]

    def add(name: str, policy: str, credentials: dict) -> None:
        iam.create_user("us-east-1", name)
        iam.put_user_policy(name, "slurmctl", policy)
        key = iam.create_access_key(name)
        iam.access_keys.pop(key.physical_resource_id, None)
        key.access_key_id, key.secret_access_key = credentials["key"], credentials["secret"]
        iam.access_keys[key.physical_resource_id] = key

    add("slurmctl-operator", _policy(["s3:*"], ["*"]), identities["operator"])
    for user, credentials in sorted(identities.get("readers", {}).items()):
        add(f"reader-{user}", _policy(READ_ACTIONS, [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]),
            credentials)


def root_only_beyond_s3(app: DomainDispatcherApplication, host: str, port: int):
    """The WSGI app: a request that moto would route anywhere but S3 (its control API above all) is
    answered 403 unless the client's socket is root's."""
    def guarded(environ, start_response):
        service = getattr(app.get_application(environ), "service", None)
        if service != "s3":
            client = (environ.get("REMOTE_ADDR", ""), int(environ.get("REMOTE_PORT") or 0))
            if peer_uid(client, (host, port)) != 0:
                body = b"only root may use this server's control API and services other than S3\n"
                start_response("403 Forbidden", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
                return [body]
        return app(environ, start_response)
    return guarded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", required=True)
    args = parser.parse_args(argv)
    load_identities(json.load(sys.stdin), args.bucket)
    sys.stdin.close()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    dispatcher = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, root_only_beyond_s3(dispatcher, args.host, args.port), threaded=True,
               request_handler=MotoRequestHandler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
