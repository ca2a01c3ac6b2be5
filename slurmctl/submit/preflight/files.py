"""Checks on what the job reads: placeholders, config files, entrypoint, imports, data paths."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import yaml

from slurmctl.config.models import RunSpec, SiteDataConfig
from slurmctl.errors import YAMLTooLarge
from slurmctl.fsutil import read_capped, read_text_capped
from slurmctl.safe_yaml import bounded_safe_load
from slurmctl.submit.preflight.findings import CheckResult, error, warning

# ${VAR}, ${VAR:-x} and $VAR: slurmctl never expands variables, so any left is a mistake.
PLACEHOLDER_RE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
# How long submit waits for the object store to say whether a dataset exists: a store that does not answer
# is reported, not waited for (the job's staging step has its own timeouts).
STORE_CHECK_SECONDS = 8.0
_REMOTE_RE = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_COMMENT_PREFIXES = {".yaml": "#", ".yml": "#", ".toml": "#", ".env": "#"}


def check_placeholders(spec: RunSpec, workdir: Path) -> CheckResult:
    result = CheckResult("placeholders", "no unresolved ${VAR} in run.yaml, env or config files")
    values = [("entrypoint", spec.entrypoint), *((f"args[{i}]", a) for i, a in enumerate(spec.args)),
              *((f"env.{k}", v) for k, v in spec.env.items()),
              *((f"data[{i}]", d if isinstance(d, str) else d.src) for i, d in enumerate(spec.data)),
              ("workdir", spec.workdir or ""), ("image", spec.image or ""),
              ("checkpoint.dir", spec.checkpoint.dir or ""),
              *((f"config_files[{i}]", c) for i, c in enumerate(spec.config_files))]
    for name, value in values:
        m = PLACEHOLDER_RE.search(value)
        if m:
            result.findings.append(error(
                "unresolved-variable", f"`{name}` still contains {m.group(0)}.",
                "Replace it with the real value in run.yaml (slurmctl does not expand variables)."))
    for rel in spec.config_files:
        path = _resolve(rel, workdir)
        if PLACEHOLDER_RE.search(rel) or _kind(path) != "file":
            continue  # reported above / by check_config_files
        comment = _COMMENT_PREFIXES.get(path.suffix.lower(), None if path.suffix else "#")
        for number, line in enumerate(_read_lines(path), 1):
            if comment and line.lstrip().startswith(comment):
                continue
            m = PLACEHOLDER_RE.search(line)
            if m:
                result.findings.append(error(
                    "unresolved-variable", f"{rel} line {number} still contains {m.group(0)}.",
                    f"Fill in the value in {path} (nothing expands it before the job reads it)."))
    return result


def check_config_files(spec: RunSpec, workdir: Path) -> CheckResult:
    result = CheckResult("config-files", "config files exist and parse")
    for rel in spec.config_files:
        if PLACEHOLDER_RE.search(rel):
            continue
        path = _resolve(rel, workdir)
        kind = _kind(path)
        if kind == "denied":
            result.findings.append(error("unreadable-config-file", f"config file {rel} is not readable by you "
                                         f"(looked at {path}).", "Fix `config_files` in run.yaml, or its permissions."))
            continue
        if kind in ("dir", "other"):
            result.findings.append(error("invalid-config-file", f"config file {rel} is not a regular file "
                                         f"(a folder, FIFO or device at {path}).", "Point `config_files` at files."))
            continue
        if kind != "file":
            result.findings.append(error("missing-config-file", f"config file {rel} does not exist (looked at {path}).",
                                         "Fix `config_files` in run.yaml (paths are relative to workdir)."))
            continue
        problem = _parse_problem(path)
        if problem:
            result.findings.append(error("invalid-config-file", f"config file {rel} does not parse: {problem}.",
                                         f"Fix the syntax of {path}."))
    result.note = f"{len(spec.config_files)} file(s)" if spec.config_files else "none declared"
    return result


def check_entrypoint(spec: RunSpec, workdir: Path) -> CheckResult:
    result = CheckResult("entrypoint", "workdir and entrypoint exist")
    if _kind(workdir) != "dir":
        result.findings.append(error("missing-workdir", f"workdir {workdir} does not exist.",
                                     "Fix `workdir` in run.yaml (relative paths are relative to run.yaml)."))
    elif _kind(workdir / spec.entrypoint) != "file":
        result.findings.append(error("missing-entrypoint", f"entrypoint {spec.entrypoint} not found in {workdir}.",
                                     "Fix `entrypoint` in run.yaml (relative to workdir)."))
    return result


def check_imports(spec: RunSpec, workdir: Path, python: str) -> CheckResult:
    """Top-level imports of the entrypoint must resolve in the job's Python (find_spec: nothing runs)."""
    result = CheckResult("imports", "entrypoint's top-level imports resolve in the job's Python")
    entry = workdir / spec.entrypoint
    if entry.suffix != ".py" or _kind(entry) != "file":
        result.note = "skipped (no Python entrypoint)"
        return result
    try:
        tree = ast.parse(read_capped(entry, CONFIG_READ_CAP, nofollow=False), filename=str(entry))
    except OSError as exc:
        result.findings.append(warning("cannot-verify-imports", f"cannot read {spec.entrypoint}: {exc}.",
                                       "Make the entrypoint a regular, readable file."))
        return result
    except (RecursionError, MemoryError):
        result.findings.append(error("entrypoint-syntax", f"{spec.entrypoint} is nested too deeply to parse.",
                                     "Simplify the file; Python itself would fail to compile it."))
        return result
    except SyntaxError as exc:
        result.findings.append(error("entrypoint-syntax", f"{spec.entrypoint} line {exc.lineno}: {exc.msg}.",
                                     "Fix the syntax error; the job would die on its first line."))
        return result
    roots = _top_level_imports(tree, workdir)
    if spec.image:
        result.findings.append(warning("cannot-verify-imports",
                                       f"imports of {spec.entrypoint} run inside image {spec.image}; not checked here.",
                                       "Run `slurmctl submit --smoke` to try them on a GPU node."))
        return result
    if not roots:
        result.note = "no third-party imports"
        return result
    interpreter, problem = _interpreter(python, workdir)
    if problem:
        result.findings.append(warning("cannot-verify-imports", problem,
                                       "Run `slurmctl submit --smoke` to try the imports on a node, or set `python` "
                                       "to an interpreter installed outside the code directory."))
        return result
    missing, problem = _missing_modules(interpreter, sorted(roots))
    if problem:
        result.findings.append(warning("cannot-verify-imports", problem,
                                       "Check `python` in run.yaml or site.yaml, or run `slurmctl submit --smoke`."))
        return result
    for module in missing:
        result.findings.append(error(
            "missing-import", f"{spec.entrypoint} line {roots[module]} imports `{module}`, which {python} cannot find.",
            f"Install it into the job's environment ({python} -m pip install ...) or fix the import."))
    result.note = f"{len(roots)} module(s) found by {python}" if not missing else ""
    return result


def check_data(spec: RunSpec, workdir: Path, site_data: SiteDataConfig | None = None) -> CheckResult:
    """`site_data`: the site's object store and caches (site.yaml `data:`), for datasets."""
    result = CheckResult("data", "data paths exist and are readable")
    site_data = site_data or SiteDataConfig()
    for dataset in spec.datasets:
        if dataset.cache == "shared" and not site_data.shared_cache_dir:
            result.findings.append(error("no-shared-cache", f"dataset {dataset.name} asks for `cache: shared`, but "
                                         "this site has no shared cache tier (site.yaml data.shared_cache_dir).",
                                         "Use `cache: node` (or none), or ask the platform team for a shared tier."))
        finding = _check_remote(dataset.src, site_data.client_options(
            dataset.src, connect=STORE_CHECK_SECONDS / 2, read=STORE_CHECK_SECONDS / 2, attempts=1),
            site_data.endpoint_url if dataset.src.startswith("s3://") else None)
        if finding:
            result.findings.append(finding)
    for data_path in spec.data_paths:
        if PLACEHOLDER_RE.search(data_path):
            continue  # reported by check_placeholders
        if _REMOTE_RE.match(data_path):
            finding = _check_remote(data_path)
            if finding:
                result.findings.append(finding)
            continue
        path = _resolve(data_path, workdir)
        kind = _kind(path)
        if kind == "missing":
            result.findings.append(error("missing-data", f"data path {data_path} does not exist (looked at {path}).",
                                         "Fix `data` in run.yaml, or stage the data first."))
        elif kind == "denied" or not os.access(path, os.R_OK) or (kind == "dir" and not os.access(path, os.X_OK)):
            result.findings.append(error("unreadable-data", f"data path {data_path} is not readable by you.",
                                         f"Fix its permissions (`chmod -R a+rX {path}`) or ask its owner."))
    result.note = (f"{len(spec.data_paths)} path(s), {len(spec.datasets)} dataset(s)" if spec.datasets
                   else f"{len(spec.data)} path(s)" if spec.data else "none declared")
    return result


def _check_remote(url: str, storage_options: dict | None = None, endpoint: str | None = None):
    try:
        import fsspec
    except ImportError:
        return warning("cannot-verify-data", f"cannot verify {url}: fsspec is not installed here.",
                       "Install fsspec with its backend (gcsfs / s3fs) to check remote data at submit.")
    answer: dict = {}

    def ask() -> None:
        try:
            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
            answer["exists"] = fs.exists(path)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            answer["error"] = exc

    # The clients retry a store that accepts connections but never answers for minutes (s3fs retries
    # botocore's retries): the check waits a few seconds, then says so and lets the submit go on.
    asking = threading.Thread(target=ask, daemon=True, name="preflight-store-check")
    asking.start()
    asking.join(STORE_CHECK_SECONDS)
    if asking.is_alive():
        store = f"the object store at {endpoint} (site.yaml data.endpoint_url)" if endpoint else "the object store"
        return warning("store-not-answering", f"{store} did not answer within {STORE_CHECK_SECONDS:.0f} s, so {url} "
                       "could not be checked; submitting anyway.",
                       "If the store is down the job's staging step stops with a message naming it (at most "
                       "site.yaml data.staging_timeout); check the store, or tell the operator if it lasts.")
    try:
        if "error" in answer:
            raise answer["error"]
        exists = answer["exists"]
    except ImportError as exc:
        return warning("cannot-verify-data", f"cannot verify {url}: {exc}.",
                       "Install the fsspec backend for this scheme (gcsfs for gs://, s3fs for s3://).")
    except Exception as exc:  # noqa: BLE001 - credentials, network: report, never block on it
        return warning("cannot-verify-data", f"cannot verify {url}: {type(exc).__name__}: {exc}.",
                       "Check your credentials for this bucket.")
    if not exists:
        return error("missing-data", f"data path {url} does not exist.",
                     "Fix `data` in run.yaml, or upload the data first.")
    return None


def _kind(path: Path) -> str:
    """'file', 'dir', 'other', 'missing' or 'denied'. Path.exists()/is_file() raise PermissionError
    for a path under a folder the user cannot enter (another user's private directory)."""
    try:
        mode = os.stat(path).st_mode
    except PermissionError:
        return "denied"
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError:
        return "other"
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def _resolve(rel: str, workdir: Path) -> Path:
    path = Path(rel).expanduser()
    return path if path.is_absolute() else workdir / path


# Config files are read whole to parse them: capped, and a FIFO or device is refused without
# blocking (fsutil), so a hostile path in `config_files` cannot hang `submit --dry-run`.
CONFIG_READ_CAP = 16 * 1024 * 1024


def _read_lines(path: Path) -> list[str]:
    try:
        return read_text_capped(path, CONFIG_READ_CAP, nofollow=False).splitlines()
    except OSError:
        return []


def _parse_problem(path: Path) -> str | None:
    suffix = path.suffix.lower()
    try:
        raw = read_capped(path, CONFIG_READ_CAP + 1, nofollow=False)
        if len(raw) > CONFIG_READ_CAP:
            return f"it is larger than {CONFIG_READ_CAP // (1024 * 1024)} MiB, too large to check"
        text = raw.decode()
        if suffix in (".yaml", ".yml"):
            bounded_safe_load(text)
        elif suffix == ".json":
            json.loads(text)
        elif suffix == ".toml":
            tomllib.loads(text)
        elif suffix == ".env" or path.name.startswith(".env"):
            for number, line in enumerate(text.splitlines(), 1):
                stripped = line.strip().removeprefix("export ").strip()
                if stripped and not stripped.startswith("#") and "=" not in stripped:
                    return f"line {number} is not KEY=VALUE"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return f"line {mark.line + 1}: {getattr(exc, 'problem', 'malformed YAML')}" if mark else "malformed YAML"
    except YAMLTooLarge as exc:
        return str(exc)
    except RecursionError:
        return "it is nested too deeply"
    except json.JSONDecodeError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except tomllib.TOMLDecodeError as exc:
        return str(exc)
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read it ({exc})"
    return None


def _top_level_imports(tree: ast.Module, workdir: Path) -> dict[str, int]:
    """Module-level imports (not inside try:, which usually means optional) -> first line number."""
    roots: dict[str, int] = {}
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            root = name.split(".")[0]
            local = _kind(workdir / f"{root}.py") != "missing" or _kind(workdir / root) == "dir"
            if root not in sys.stdlib_module_names and not local and root != "__future__":
                roots.setdefault(root, node.lineno)
    return roots


_FIND_SPECS = ("import importlib.util, json, sys\n"
               "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))")


def _interpreter(python: str, workdir: Path) -> tuple[str | None, str | None]:
    """(absolute path of the job's python, None) or (None, why it is not run here).

    Preflight (and so `submit --dry-run`) must never run a program that comes with the code it
    checks: `python: ./tools.sh` in a run.yaml would otherwise execute on the submitting machine.
    A name without '/' is looked up on PATH (never in the workdir); a relative path is relative to
    the workdir, so it is the code's own. Anything that lies in the workdir, before or after
    resolving symlinks, is not run."""
    if "/" in python:
        path = Path(python).expanduser()
        if not path.is_absolute():
            return None, (f"`python` {python} is a path inside the code directory; preflight does not run "
                          "programs that come with the code, so imports are not checked here.")
    else:
        found = shutil.which(python)
        if found is None:
            return None, f"the job's python {python} does not exist on this machine; imports not checked."
        path = Path(found)
    path = Path(os.path.abspath(path))
    root = workdir.resolve()
    for candidate in (path, path.resolve()):
        if candidate == root or root in candidate.parents:
            return None, (f"the job's python {python} lies inside the code directory {workdir}; preflight does not "
                          "run programs that come with the code, so imports are not checked here.")
    if _kind(path) != "file" or not os.access(path, os.X_OK):
        return None, f"the job's python {python} is not an executable file on this machine; imports not checked."
    return str(path), None


def _missing_modules(python: str, modules: list[str]) -> tuple[list[str], str | None]:
    # cwd is neutral (not the workdir): nothing of the code is on sys.path, and local modules were
    # already set aside by _top_level_imports.
    try:
        proc = subprocess.run([python, "-c", _FIND_SPECS, *modules], cwd="/", capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return [], f"the job's python {python} cannot be run here ({exc.strerror}); imports not checked."
    except subprocess.TimeoutExpired:
        return [], f"{python} took over 60 s to look up imports; not checked."
    if proc.returncode != 0:
        return [], f"{python} could not look up imports: {proc.stderr.strip().splitlines()[-1:]}"
    try:
        missing = json.loads(proc.stdout)
    except ValueError:
        return [], f"{python} did not answer the import lookup; imports not checked."
    return [m for m in missing if isinstance(m, str)], None
