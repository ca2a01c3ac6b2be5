"""The one way slurmctl talks to Slurm: SlurmClient over an injected runner.

The names below load on first use (PEP 562): a node hook that imports only `slurmctl.slurm.records`
must not pay for the client, its parsers and their regexes on every job's prolog."""

_EXPORTS = {"Job": "slurmctl.slurm.client", "NodeInfo": "slurmctl.slurm.client",
            "SlurmClient": "slurmctl.slurm.client", "CommandResult": "slurmctl.slurm.runner",
            "LocalRunner": "slurmctl.slurm.runner"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # why: the lazy exports above; nothing else here imports at all

    return getattr(importlib.import_module(_EXPORTS[name]), name)
