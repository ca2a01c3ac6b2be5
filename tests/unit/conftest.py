import pytest

from .fakes import pin_seal


@pytest.fixture(autouse=True)
def _pinned_seal(monkeypatch):
    """Slurm listings are sealed with a secret per call; replayed output needs the recorded one."""
    pin_seal(monkeypatch)
