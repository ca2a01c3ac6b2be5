"""Every error code and exit code lives in slurmctl/errors.py: unique, kebab-case, documented,
and every code the package raises is registered there."""

import re
from pathlib import Path

import pytest

from slurmctl import errors
from slurmctl.errors import CODES, EXIT_CODES, SlurmctlError, UnsafeFile

PACKAGE = Path(errors.__file__).parent
KEBAB = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _error_classes():
    return [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, SlurmctlError)]


def test_codes_are_kebab_case_and_map_to_documented_exit_codes():
    for code, exit_code in CODES.items():
        assert KEBAB.fullmatch(code), code
        assert exit_code in EXIT_CODES and exit_code != 0, (code, exit_code)


def test_each_class_has_its_own_registered_code():
    """A class that sets no code of its own raises its parent's failure (PreflightFailed: every
    preflight problem at once) and shares its code."""
    classes = _error_classes()
    codes = [c.code for c in classes if "code" in vars(c)]
    assert len(codes) == len(set(codes)), codes
    assert all(code in CODES for code in codes)


def test_every_code_raised_in_the_package_is_registered_and_no_class_is_defined_elsewhere():
    used, stray = set(), []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        used |= set(re.findall(r"\bcode=\"([^\"]+)\"", text))
        if path.name != "errors.py":
            stray += [f"{path}: {m}" for m in re.findall(r"^    (?:code|exit_code) = [\"\d].*", text, re.M)]
            stray += [f"{path}: exits by itself" for _ in re.findall(r"\bsys\.exit\(|\bSystemExit\(", text)
                      if "/cli/" in str(path) and path.name != "__main__.py"]
    assert used and not used - CODES.keys(), used - CODES.keys()
    assert stray == []


def test_an_unregistered_code_is_refused():
    with pytest.raises(ValueError, match="unregistered"):
        SlurmctlError("x", code="made-up-code")


def test_exit_code_and_json_follow_the_code():
    exc = SlurmctlError("bad duration", "write 2h", code="invalid-duration")
    assert exc.exit_code == 2
    assert exc.to_dict() == {"error": "invalid-duration", "exit_code": 2, "message": "bad duration",
                             "hint": "write 2h"}
    assert errors.SSHError("down").exit_code == 3 and errors.ResumeError("no").exit_code == 6


def test_unsafe_file_is_an_oserror_too():
    with pytest.raises(OSError) as caught:
        raise UnsafeFile("/runs/a/job.sbatch", "a FIFO (named pipe)")
    assert caught.value.code == "unsafe-file" and caught.value.exit_code == 7
    assert str(caught.value).startswith("/runs/a/job.sbatch is a FIFO")
