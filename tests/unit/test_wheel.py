"""The built wheel, installed into a fresh venv outside the source tree, can scaffold and render a job.

An editable install reads the templates from the checkout, so only a real wheel in a clean venv shows
whether `slurmctl.submit`'s package data (sbatch templates, init templates) is actually shipped.
The dependencies are installed with the pinned constraints, as CI installs them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")  # Debian's: a venv from it is usable by every user

RENDER = r"""
import sys
from pathlib import Path

import slurmctl
from slurmctl.submit.render import render
from slurmctl.config.models import load_run_spec, load_site_config
from slurmctl.submit.submission import TEMPLATE, resolve_workdir, sbatch_context

spec_path = Path(sys.argv[1])
site = load_site_config()
spec = load_run_spec(spec_path)
run_dir = Path(site.runs_root) / "wheel-test-20990101-abcd"
context = sbatch_context(spec, site, "wheel-test-20990101-abcd", run_dir, resolve_workdir(spec, spec_path))
print("PACKAGE", slurmctl.__file__)
print(render(TEMPLATE, context))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH or venv of the checkout can leak into the fresh install."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env["PATH"] = "/usr/bin:/bin"
    return {**env, **extra}


def build_wheel(workspace: Path) -> Path:
    """Build from a copy of the sources, so the build writes nothing into the shared checkout."""
    src, dist = workspace / "src", workspace / "dist"
    src.mkdir()
    shutil.copy2(REPO / "pyproject.toml", src / "pyproject.toml")
    shutil.copytree(REPO / "slurmctl", src / "slurmctl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # --no-build-isolation: build with this venv's setuptools instead of downloading one.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(src)], check=True, capture_output=True, text=True, timeout=120,
                   cwd=src)
    [built] = dist.glob("slurmctl-*.whl")
    return built


def install_fresh_venv(wheel: Path, venv: Path) -> Path:
    """A venv from Debian's python3 with the wheel and its dependencies (pinned by constraints.txt)."""
    if not SYSTEM_PYTHON.exists():
        pytest.fail(f"{SYSTEM_PYTHON} is missing: the project's venvs are made from Debian's python3")
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(venv)], check=True, timeout=120, env=_clean_env())
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                              "-c", str(REPO / "constraints.txt"), str(wheel)],
                             capture_output=True, text=True, timeout=300, env=_clean_env())
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    return install_fresh_venv(wheel, tmp_path_factory.mktemp("venv") / "v")


def test_wheel_ships_the_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {Path(n).name for n in names if n.startswith("slurmctl/submit/sbatch_templates/")}
    in_tree = {p.name for p in (REPO / "slurmctl" / "submit" / "sbatch_templates").glob("*.j2")}
    assert in_tree and shipped == in_tree
    init = {n for n in names if n.startswith("slurmctl/submit/init_templates/torchrun/")}
    assert {Path(n).name for n in init} >= {"run.yaml.j2", "train.py"}


def test_installed_wheel_scaffolds_and_renders_a_job_outside_the_repo(fresh_venv, tmp_path):
    site = tmp_path / "site.yaml"
    shutil.copy2(REPO / "deploy" / "local" / "site.yaml", site)
    assert "sbatch_templates_dir" not in site.read_text()  # the packaged templates must be the ones used
    work = tmp_path / "work"
    work.mkdir()
    env = _clean_env(SLURMCTL_SITE_CONFIG=str(site), HOME=str(tmp_path))

    init = subprocess.run([str(fresh_venv / "bin" / "slurmctl"), "init", "wheeltest", "--dir", str(work / "wheeltest")],
                          capture_output=True, text=True, timeout=60, cwd=work, env=env)
    assert init.returncode == 0, init.stderr
    spec_path = work / "wheeltest" / "run.yaml"
    assert spec_path.is_file() and (work / "wheeltest" / "train.py").is_file()

    rendered = subprocess.run([str(fresh_venv / "bin" / "python"), "-c", RENDER, str(spec_path)],
                              capture_output=True, text=True, timeout=60, cwd=work, env=env)
    assert rendered.returncode == 0, rendered.stderr
    first, _, script = rendered.stdout.partition("\n")
    package = Path(first.removeprefix("PACKAGE ")).resolve()
    assert package.is_relative_to(fresh_venv.resolve()), f"imported {package}, not the installed wheel"
    assert not package.is_relative_to(REPO)
    assert script.startswith("#!/bin/bash") or script.startswith("#!/usr/bin/env bash"), script[:80]
    assert "#SBATCH --job-name=wheel-test-20990101-abcd" in script
    assert "train.py" in script
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        requirement = line.split("#", 1)[0].strip()
        if requirement:
            name, _, version = requirement.partition("==")
            assert version, f"constraints.txt: '{line}' is not pinned with =="
            pins[_canonical(name)] = version.strip()
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_dependency_is_pinned_and_installed_at_its_pin():
    """What CI installs is what the tests ran with: each dependency of the package and of the extras
    scripts/setup installs has a pin, and this venv holds exactly the pinned versions."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, version

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(d for extra in ("dev", "train", "debug")
                                          for d in project["optional-dependencies"][extra])]
    pins = _pins()
    names = {_canonical(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]) for d in wanted}
    assert names - set(pins) == set(), "dependencies without a pin in constraints.txt"
    for name, pinned in pins.items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            pytest.fail(f"{name}=={pinned} is pinned but not installed: rerun scripts/setup")
        assert installed.split("+")[0] == pinned.split("+")[0], \
            f"{name} {installed} installed, constraints.txt pins {pinned}: rerun scripts/setup or refresh the pins"
