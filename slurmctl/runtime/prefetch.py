"""Background prefetch for `rt.data(loader, prefetch=N)`: a thread reads ahead at most N batches into a
bounded queue, so fetching the next batch (from the object store or the node cache) overlaps the step.
Memory stays bounded at N batches; an exception of the loader reaches the training at the batch where
it happened; leaving the loop early stops the thread at its next batch."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

_END = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def prefetched(iterable: Iterable, depth: int) -> Iterator:
    if depth < 1:
        yield from iterable
        return
    batches: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def fill() -> None:
        try:
            for batch in iterable:
                while not stop.is_set():
                    try:
                        batches.put(batch, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            item = _END
        except BaseException as exc:  # noqa: BLE001 - handed to the training's thread, raised there
            item = _Failed(exc)
        while not stop.is_set():
            try:
                batches.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    thread = threading.Thread(target=fill, name="slurmctl-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = batches.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
