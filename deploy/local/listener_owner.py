"""Exit 0 when the TCP listener that a connection to HOST:PORT reaches belongs to ACCOUNT; else say
who holds the port and exit 1 (2: nothing listens there yet).

    listener_owner.py HOST:PORT ACCOUNT

The deployment scripts call it before they send a login to a loopback service they started
(images-up to the registries, s3-up to the object store): any user of the machine can bind a free
loopback port first, and an answer alone ("401", "healthy") proves nothing about who answers. The
owner is the kernel's record of the listening socket (slurmctl.sockowner.listener_uid)."""

from __future__ import annotations

import pwd
import sys

from slurmctl.sockowner import listener_uid


def main(argv: list[str]) -> int:
    if len(argv) != 2 or ":" not in argv[0]:
        print("usage: listener_owner.py HOST:PORT ACCOUNT", file=sys.stderr)
        return 64
    host, _, port = argv[0].rpartition(":")
    want = pwd.getpwnam(argv[1]).pw_uid
    uid = listener_uid(host.strip("[]"), int(port))
    if uid is None:
        print(f"nothing listens on {argv[0]}", file=sys.stderr)
        return 2
    if uid != want:
        try:
            who = f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
        except KeyError:
            who = f"uid {uid}"
        print(f"{argv[0]} is held by {who}, not by {argv[1]}: refusing to send it a login. Stop that "
              f"process (ss -ltnp 'sport = :{port}') or choose another port, then run this again.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
