"""Load synthetic training shards into an S3-compatible object store (the local moto server).

    python deploy/local/s3_shards.py --endpoint http://127.0.0.1:5070 --bucket B --prefix P --shards 8 --shard-mb 1

Each shard is deterministic pseudo-random bytes (seeded by its index), uploaded in one PUT so its
ETag is the MD5 of its bytes, the identity the node cache keys and verifies by. Idempotent: a shard
already there with the right size is left alone. Writes with the operator's key (root's
<state>/s3/operator.credentials, which deploy/local/s3-up makes; --credentials or
$SLURMCTL_S3_CREDENTIALS names another file).
"""

from __future__ import annotations

import argparse
import base64
import configparser
import hashlib
import os
import random
import sys

import boto3
import botocore.exceptions


def shard_bytes(index: int, size: int) -> bytes:
    return random.Random(index).randbytes(size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mb", type=float, default=1.0)
    parser.add_argument("--credentials", default=os.environ.get("SLURMCTL_S3_CREDENTIALS") or os.path.join(
        os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local"), "s3", "operator.credentials"))
    args = parser.parse_args(argv)
    credentials = configparser.ConfigParser(interpolation=None)
    if not credentials.read(args.credentials) or "default" not in credentials:
        print(f"s3_shards: no operator key in {args.credentials} (deploy/local/s3-up makes it; run as root)",
              file=sys.stderr)
        return 1
    s3 = boto3.client("s3", endpoint_url=args.endpoint, region_name="us-east-1",
                      aws_access_key_id=credentials["default"]["aws_access_key_id"],
                      aws_secret_access_key=credentials["default"]["aws_secret_access_key"])
    try:
        s3.create_bucket(Bucket=args.bucket)
    except botocore.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    size = int(args.shard_mb * 1024 * 1024)
    present = {obj["Key"]: obj["Size"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=args.bucket, Prefix=args.prefix.rstrip("/") + "/") for obj in page.get("Contents", [])}
    uploaded = 0
    for index in range(args.shards):
        key = f"{args.prefix.rstrip('/')}/shard-{index:05d}.bin"
        if present.get(key) == size:
            continue
        body = shard_bytes(index, size)
        s3.put_object(Bucket=args.bucket, Key=key, Body=body, ContentMD5=_b64md5(body))
        uploaded += 1
    print(f"s3_shards: s3://{args.bucket}/{args.prefix.rstrip('/')}/ holds {args.shards} shard(s) of "
          f"{size} bytes ({uploaded} uploaded now)", file=sys.stderr)
    return 0


def _b64md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


if __name__ == "__main__":
    sys.exit(main())
