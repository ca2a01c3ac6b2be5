"""What a researcher writes (RunSpec, run.yaml) and what an admin writes (SiteConfig, site.yaml).

Validation errors name the field, the bad value and the fix; see ``format_validation_error``.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from slurmctl.config.locate import find_site_config
from slurmctl.config.pricing import Discounts
from slurmctl.durations import parse_duration, parse_seconds
from slurmctl.errors import ConfigError, SpecError, UnsafeFile, YAMLTooLarge
from slurmctl.fsutil import read_capped
from slurmctl.safe_yaml import MAX_YAML_BYTES, bounded_safe_load

# Identifiers land unquoted on #SBATCH lines and in `export NAME=`, so they are checked with
# fullmatch: `re.match` with a trailing `$` accepts "name\n", and that newline starts a new line
# of the job script. \A...\Z keeps callers that still use .match() safe too.
NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,47}\Z")
ENV_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
PARTITION_RE = re.compile(r"\A[A-Za-z0-9._-]{1,64}\Z")
GPU_TYPE_RE = re.compile(r"\A[A-Za-z0-9._-]{1,64}\Z")
MEM_RE = re.compile(r"[1-9][0-9]{0,8}[KMGT]?")


def control_character(text: str) -> str | None:
    """The first character of `text` that could end or rewrite a line of a script (CR, LF, NUL, ESC,
    any other control character, or a Unicode line/paragraph separator), else None."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return char
    return None


def _no_control_characters(value: Any, where: str) -> None:
    """Walk a raw YAML value (keys too): every string must be one clean line."""
    if isinstance(value, str):
        bad = control_character(value)
        if bad is not None:
            raise ValueError(f"{where} contains the control character {bad!r}; every value ends up on one line "
                             "of the job script (#SBATCH or export), where a line break or control character "
                             "would start a new command. Write it on one line, without control characters")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_control_characters(key, f"a key of {where}")
            _no_control_characters(item, f"{where[:-1]}.{key}`" if isinstance(key, str) and where.endswith("`")
                                   else where)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _no_control_characters(item, f"{where[:-1]}[{i}]`" if where.endswith("`") else where)


# Run templates: `slurmctl init --template T` writes an example for T, and `template: T` in run.yaml
# renders sbatch_templates/T.sbatch.j2.
TEMPLATES = ("torchrun", "fsdp", "hf-lora", "deepspeed")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)

    @field_validator("*", mode="before")
    @classmethod
    def _one_line(cls, v: Any, info) -> Any:
        _no_control_characters(v, f"`{info.field_name}`")
        return v


class CheckpointSpec(_Strict):
    dir: str | None = Field(None, description="where checkpoints go; default <run dir>/checkpoints")
    interval_steps: int = Field(100, ge=1, description="save every N steps")
    keep_last: int = Field(3, ge=1, description="valid checkpoints to keep")


class TrackingSpec(_Strict):
    backend: Literal["none", "wandb", "mlflow"] = Field("none", description="none, wandb or mlflow")
    project: str | None = Field(None, description="W&B project / MLflow experiment name")


NOTIFY_EVENTS = ("started", "failed", "recovered", "finished", "stalled", "pending")


class NotifySpec(_Strict):
    """Messages about the run, sent as the user (slurmctl/notify). A channel is the NAME of a key in the
    user's 0600 secrets file whose value is the destination URL (apprise's mailto://, Slack's
    https://hooks.slack.com/..., mmost://, or signed+https://...?secret=... for an HMAC-signed webhook):
    no address or credential is ever written in run.yaml, the job script or the logs."""

    channels: list[str] = Field(default_factory=list, description="secrets-file keys naming where messages go")
    events: list[Literal[NOTIFY_EVENTS]] = Field(list(NOTIFY_EVENTS), description="which events send a message: "
                                                 + ", ".join(NOTIFY_EVENTS))
    pending_after: str = Field("30m", description="a job still pending this long sends one `pending` message")
    max_per_hour: int = Field(12, ge=1, le=1000, description="at most this many messages per run and hour")

    @field_validator("channels")
    @classmethod
    def _channels(cls, v: list[str]) -> list[str]:
        for key in v:
            if not ENV_NAME_RE.fullmatch(key):
                raise ValueError(f"{key!r} is not a secrets-file key (use an environment-variable name such as "
                                 "SLACK_WEBHOOK); the URL itself goes in the secrets file")
        return v

    @field_validator("pending_after", mode="before")
    @classmethod
    def _pending_after(cls, v: Any) -> str:
        if parse_duration(v) < 1:
            raise ValueError("must be at least one second, e.g. '30m'")
        return str(v)


class BuildSpec(_Strict):
    """Build the run's image at submit: pushed to the site registry and pinned by digest."""

    dockerfile: str = Field("Dockerfile", description="Dockerfile, relative to workdir")
    context: str = Field(".", description="build context directory, relative to workdir")
    repository: str | None = Field(None, description="repository in the site registry; default: <user>/<name> (a user "
                                      "pushes only under their own name)")
    args: dict[str, str] = Field(default_factory=dict, description="Docker build arguments (--build-arg)")


class ModelSpec(_Strict):
    """What the memory estimate needs (see slurmctl/submit/memory.py for the formula)."""

    params: str | float = Field(description="parameter count: 7e9, '7b', '350m'")
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = Field(
        "bf16", description="training precision (bf16/fp16/fp8 = mixed, with fp32 master weights)")
    optimizer: Literal["adamw", "adam", "sgd", "sgd-momentum", "lion", "adafactor"] = Field(
        "adamw", description="optimizer")
    sharding: Literal["ddp", "zero1", "zero2", "zero3", "fsdp"] | None = Field(
        None, description="ddp, zero1/2/3 or fsdp (= zero3); default: the run's template's (deepspeed: the "
        "ZeRO stage of its config)")
    trainable_params: str | float | None = Field(
        None, description="parameters that get gradients and optimizer state (LoRA adapters); default: all")
    micro_batch: int | None = Field(None, ge=1, description="sequences per GPU per step")
    seq_len: int | None = Field(None, ge=1, description="tokens per sequence")
    hidden_size: int | None = Field(None, ge=1, description="model width, for the activation estimate")
    num_layers: int | None = Field(None, ge=1, description="transformer layers, for the activation estimate")
    vocab_size: int | None = Field(None, ge=1,
                                   description="vocabulary size, for the logits (seq_len x vocab) of the loss")
    activation_checkpointing: bool = Field(False, description="recompute activations in the backward pass")


DATA_NAME_RE = re.compile(r"\A[A-Za-z][A-Za-z0-9_]{0,31}\Z")
# s3://bucket/prefix or gs://bucket/prefix: bucket names as the stores allow them, a prefix of plain
# path characters (it becomes directory names of the cache's per-run view).
DATA_SRC_RE = re.compile(r"\A(s3|gs)://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])(/[A-Za-z0-9._/=+-]*)?\Z")
DATA_CACHE_POLICIES = ("node", "shared", "none")


class DataSource(_Strict):
    """run.yaml `data:` entry that names an object-store dataset and how it is cached. Before the training
    starts, a job step stages it on every node (slurmctl/runtime/datastage.py); the training finds it at
    $SLURMCTL_DATA_<NAME> (a local directory; with `cache: none`, the object-store URL itself)."""

    src: str = Field(description="object-store prefix: s3://bucket/prefix or gs://bucket/prefix")
    cache: Literal[DATA_CACHE_POLICIES] = Field(
        "node", description="node (the node-local cache), shared (the site's shared-filesystem tier) or none (the "
        "training reads the object store directly)")
    name: str | None = Field(None, description="the dataset's name: $SLURMCTL_DATA_<NAME> (letters, digits, '_'); "
                             "default: the last part of `mount`, else of `src`")
    mount: str | None = Field(None, description="absolute path the dataset appears at inside the run's container "
                              "(runs with `image:` or `build:`; refused without one), e.g. /data/shards")

    @field_validator("src")
    @classmethod
    def _src(cls, v: str) -> str:
        match = DATA_SRC_RE.fullmatch(v)
        if not match or ".." in (match.group(3) or "").split("/"):
            raise ValueError("write the dataset as s3://bucket/prefix or gs://bucket/prefix (bucket: lower-case "
                             "letters, digits, '.', '-'; prefix: letters, digits and ._/=+-, no '..')")
        return v.rstrip("/")

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or not SAFE_MOUNT_RE.fullmatch(v) or ".." in v.split("/")):
            raise ValueError("write an absolute path of letters, digits and ._/-, e.g. /data/shards")
        return v.rstrip("/") if v and v != "/" else v

    @model_validator(mode="after")
    def _name(self) -> DataSource:
        if self.mount and self.cache == "none":
            raise ValueError(f"`mount: {self.mount}` needs a cached dataset: with `cache: none` nothing is staged to "
                             "mount, and the training reads the store at $SLURMCTL_DATA_<NAME>; remove `mount:` or "
                             "use `cache: node`")
        if self.name is None:
            base = (self.mount or self.src).rstrip("/").rsplit("/", 1)[-1]
            self.name = re.sub(r"[^A-Za-z0-9_]", "_", base) or "data"
            if not self.name[0].isalpha():
                self.name = "d_" + self.name
            self.name = self.name[:32]
        elif not DATA_NAME_RE.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} must be letters, digits and '_' (at most 32, starting with a "
                             "letter): it becomes the environment variable SLURMCTL_DATA_<NAME>")
        return self

    @property
    def env_var(self) -> str:
        return f"SLURMCTL_DATA_{self.name.upper()}"


SAFE_MOUNT_RE = re.compile(r"[A-Za-z0-9/._-]{1,200}")


def _data_entry_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "path"
    return "dataset" if isinstance(value, dict | DataSource) else None


# A `data:` entry is a path (a string) or a dataset (a mapping), told apart by its type, so that a bad entry
# gets the errors of its own kind only (not also "should be a valid string" for every mapping).
DataEntry = Annotated[
    Annotated[str, Tag("path")] | Annotated[DataSource, Tag("dataset")],
    Discriminator(_data_entry_kind, custom_error_type="data_entry",
                  custom_error_message="write a path (a string) or an object-store dataset "
                  "{src: s3://bucket/prefix, cache: node|shared|none, name: NAME}"),
]
# Pydantic names the union member a nested error came from in its location: not a field of run.yaml.
_UNION_TAGS = frozenset({"path", "dataset"})


class SweepSpec(_Strict):
    """run.yaml `sweep:` (or `slurmctl sweep --grid`): one Slurm array, one run per combination of values.
    The grid is checked (empty values, unknown keys, size) by slurmctl/submit/sweep.py."""

    grid: dict[str, list[str | int | float]] = Field(
        description="key -> list of values; a key names an `args` option (--key VALUE or --key=VALUE) or an `env` "
        "variable of this run.yaml")
    max_parallel: int | None = Field(None, ge=1, description="elements running at once (sbatch --array=0-N%max)")
    metric: str = Field("loss", description="metric (metrics.jsonl field) that `compare SWEEP` ranks by")
    goal: Literal["min", "max"] = Field("min", description="min or max: which end of `metric` is best")


class RunSpec(_Strict):
    """run.yaml: my code + some GPUs + a launch script."""

    name: str = Field(description="lower-case letters, digits, '.', '_' or '-', at most 48 chars")
    entrypoint: str = Field(description="the training script, relative to workdir (e.g. train.py)")
    args: list[str] = Field(default_factory=list, description="arguments passed to the entrypoint")
    workdir: str | None = Field(None, description="code directory; default: the folder of run.yaml")
    nodes: int = Field(1, ge=1, le=1024, description="number of nodes")
    gpus_per_node: int = Field(1, ge=0, le=64, description="GPUs per node")
    gpu_type: str | None = Field(None, description="GPU model, e.g. h100; default: the partition's")
    procs_per_node: int | None = Field(None, ge=1, description="torchrun processes per node; default: gpus_per_node")
    cpus_per_gpu: int | None = Field(None, ge=1, description="CPU cores per GPU; default from site config")
    cpus_per_proc: int | None = Field(None, ge=1, le=1024,
                                      description="CPU cores per process of a CPU-only run (gpus_per_node: 0); "
                                      "default 1. The job gets procs_per_node x cpus_per_proc CPUs per node")
    mem: str | None = Field(None, description="memory per node in Slurm's syntax ('16G', '512M'); default: the "
                            "cluster's DefMemPerCPU for every CPU")
    partition: str | list[str] = Field(description="a partition, or a list of acceptable ones")
    time_limit: str = Field("01:00:00", description="wall-clock limit: '2h', '90m' or '01:30:00'")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables (strings)")
    data: list[DataEntry] = Field(
        default_factory=list, description="data the job reads: a path that must exist, or an object-store dataset "
        "staged into the node cache before the training, {src: s3://bucket/prefix, cache: node|shared|none, "
        "name: NAME, mount: /data/NAME}")
    secrets: list[str] = Field(default_factory=list,
                               description="names of keys read from the secrets file at job start")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    notify: NotifySpec | bool | None = Field(None, description="where messages about the run go (see NotifySpec); "
                                             "false: none; unset: the user's default (~/.config/slurmctl/config.yaml)")
    python: str | None = Field(None, description="python on the compute nodes; default from site config")
    max_restarts: int = Field(3, ge=0, le=100, description="automatic restarts after failures (preemptions and "
                              "time-limit drains do not count)")
    image: str | None = Field(None, description="container image the training runs in, pinned as "
                              "registry/repo@sha256:<digest>")
    build: BuildSpec | None = Field(None,
                                    description="build the image from a Dockerfile at submit (see `submit --build`)")
    config_files: list[str] = Field(default_factory=list, description="config files the training reads "
                                    "(YAML/JSON/TOML/.env), relative to workdir; checked for unresolved ${VAR}")
    model: ModelSpec | None = Field(None, description="model size, precision, optimizer, sharding: enables the GPU "
                                    "memory check")
    sweep: SweepSpec | None = Field(None, description="grid of args/env values: `slurmctl sweep` submits one run "
                                    "per combination as one Slurm array")
    template: Literal[TEMPLATES] = Field("torchrun", description="how the training is launched: the sbatch "
                                         "template sbatch_templates/<template>.sbatch.j2 (`slurmctl init --template`)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError("use lower-case letters, digits, '.', '_' or '-' "
                             "(at most 48, starting with a letter or digit)")
        return v

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("name the training script, e.g. entrypoint: train.py")
        if "\n" in v or "\x00" in v:
            raise ValueError("must be one line")
        return v

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str | list[str]) -> str | list[str]:
        names = [v] if isinstance(v, str) else v
        if not names:
            raise ValueError("give at least one partition")
        for p in names:
            if not isinstance(p, str) or not PARTITION_RE.fullmatch(p):
                raise ValueError(f"{p!r} is not a partition name (letters, digits, '.', '_' or '-')")
        return v

    @field_validator("mem")
    @classmethod
    def _mem(cls, v: str | None) -> str | None:
        if v is not None and not MEM_RE.fullmatch(v):
            raise ValueError("write memory as Slurm does: a number with K, M, G or T, e.g. 16G")
        return v

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, v: str | None) -> str | None:
        if v is not None and not GPU_TYPE_RE.fullmatch(v):
            raise ValueError("write the GPU model as Slurm names it (letters, digits, '.', '_' or '-'), e.g. h100")
        return v

    @field_validator("time_limit", mode="before")
    @classmethod
    def _time(cls, v: Any) -> str:
        seconds = parse_duration(v)
        if seconds < 60:
            raise ValueError("must be at least one minute")
        return str(v)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for key, value in v.items():
            if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name "
                                 "(letters, digits and '_', not starting with a digit)")
            if isinstance(value, (dict, list)) or value is None:
                raise ValueError(f"{key}: value must be a string or number")
            out[str(key)] = (value if isinstance(value, str) else str(value).lower() if isinstance(value, bool)
                             else str(value))
        return out

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: list[str]) -> list[str]:
        for key in v:
            if not ENV_NAME_RE.fullmatch(key):
                raise ValueError(f"'{key}' is not a valid secret name (use an environment-variable name)")
        return v

    @field_validator("data")
    @classmethod
    def _data(cls, v: list[str | DataSource]) -> list[str | DataSource]:
        names = [entry.name for entry in v if isinstance(entry, DataSource)]
        twice = sorted({name.upper() for name in names if [n.upper() for n in names].count(name.upper()) > 1})
        if twice:
            raise ValueError(f"two datasets are named {twice[0]!r} (SLURMCTL_DATA_{twice[0].upper()}); give each "
                             "entry its own `name:`")
        return v

    @property
    def data_paths(self) -> list[str]:
        """The plain paths of `data:` (checked at submit); object-store datasets are `datasets`."""
        return [entry for entry in self.data if isinstance(entry, str)]

    @property
    def datasets(self) -> list[DataSource]:
        return [entry for entry in self.data if isinstance(entry, DataSource)]

    @property
    def partitions(self) -> list[str]:
        return [self.partition] if isinstance(self.partition, str) else list(self.partition)

    def with_partition(self, where: str, site: SiteConfig) -> RunSpec:
        """This spec on the partition `submit --where` names: it must be one the site configures
        (model_copy does not validate, so the check is here)."""
        if not isinstance(where, str) or not PARTITION_RE.fullmatch(where) or where not in site.partitions:
            raise SpecError(f"--where {where!r} is not a partition of cluster {site.cluster}.",
                            f"Pass --where with one of: {', '.join(sorted(site.partitions))}.")
        return self.model_copy(update={"partition": where})

    @property
    def time_limit_seconds(self) -> int:
        return parse_duration(self.time_limit)

    @property
    def nprocs_per_node(self) -> int:
        return self.procs_per_node or max(self.gpus_per_node, 1)


class PartitionConfig(_Strict):
    capacity: Literal["ondemand", "spot", "reserved", "dev"] = Field(description="capacity type")
    gpu_type: str = Field(description="GPU model in this partition, e.g. h100")
    gpus_per_node: int = Field(ge=0)
    price_per_gpu_hour: float = Field(ge=0, description="$ per GPU-hour")
    price_per_cpu_hour: float = Field(0.0, ge=0, description="$ per CPU-hour: what a job without GPUs costs "
                                      "(CPU-only runs), so it shows in cost and showback")
    preemptible: bool = False
    arch: Literal["amd64", "arm64"] = Field("amd64", description="CPU architecture of the nodes (images must match)")
    fabric: Literal["ethernet", "infiniband", "roce", "efa", "tcpx", "tcpxo"] | None = Field(
        None, description="the nodes' GPU network: ethernet, infiniband, roce, efa, tcpx or tcpxo; status warns when "
        "NCCL falls back to sockets on a faster one")
    qos: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._-]{1,64}$", description="the Slurm QOS of jobs on this partition (#SBATCH --qos), "
        "for a partition that admits only some QOS, e.g. production on h100-ondemand; unset: the user's default")
    max_nodes: int | None = Field(
        None, ge=1, description="an autoscaled pool (e.g. a GKE node pool scaled from zero): nodes are added for "
        "pending jobs, up to this many. Jobs are checked against gpus_per_node and this, not the nodes present, "
        "and a job the present nodes cannot hold pends until the pool scales up; unset: the nodes are fixed")
    cpus_per_node: int | None = Field(
        None, ge=1, description="an autoscaled pool's CPUs per node (its machine type's vCPUs): a job asking more "
        "per node never runs there and asks the pool for no node; unset: not checked")
    mem_per_node_mb: int | None = Field(
        None, ge=1, description="an autoscaled pool's memory per node in MiB (its machine type's): a job asking "
        "more per node never runs there and asks the pool for no node; unset: not checked")


class ContainersConfig(_Strict):
    """How training images are built, stored and run on this cluster."""

    runtime: Literal["none", "pyxis", "podman"] = Field(
        "none", description="none, pyxis (srun --container-image) or podman")
    registry: str | None = Field(None, description="registry host[:port] that `submit --build` pushes to")
    engine_host: str | None = Field(None, description="DOCKER_HOST of the build engine when $DOCKER_HOST is unset")
    base_image: str | None = Field(None, description="FROM image of the Dockerfile that `slurmctl init` writes")
    podman: str = Field("podman", description="podman command on the nodes (runtime: podman)")
    registry_auth_file: str | None = Field(
        None, description="auth file (containers auth.json format) of the platform's robot account, used for a "
        "registry the user has no login for")
    mounts: list[str] = Field(default_factory=list,
                              description="extra host paths mounted at the same path in the container")


class AccountingConfig(_Strict):
    """Where the cost ledger and showback reports live, and the price discounts."""

    ledger_path: str = Field("~/.local/share/slurmctl/ledger.sqlite", description="SQLite cost ledger")
    reports_dir: str = Field("~/slurmctl/reports", description="where the cron report writes dated files")
    discounts: Discounts = Field(default_factory=Discounts)
    operators_group: str | None = Field(None, description="Unix group that may read the ledger (else root only)")
    researcher_showback: bool = Field(False, description="`slurmctl report` by a researcher shows their own "
                                      "attempts, priced from sacct (else it refuses: the ledger is the operators')")


class SiteTrackingConfig(_Strict):
    """The site's experiment tracker."""

    mlflow_uri: str | None = Field(None, description="MLflow tracking server (http://host:port): submit creates "
                                   "each run's MLflow run there once, and every attempt continues it")
    mlflow_credentials: str | None = Field(
        "~/.config/slurmctl/mlflow", description="each user's own 0600 file with MLFLOW_TRACKING_USERNAME= and "
        "MLFLOW_TRACKING_PASSWORD= lines: their login on an MLflow server with authentication (submit and the "
        "job read it; deploy/local/mlflow-up writes it). A user without the file sends no login")
    mlflow_server_user: str | None = Field(
        "slurmctl-mlflow", description="the account the MLflow server runs as: when mlflow_uri is on this machine "
        "(127.0.0.1, localhost), submit and the job send a user's login only if the kernel says this account "
        "holds the port (anyone may listen on a free loopback port while the server is down)")
    wandb_mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="WANDB_MODE for runs with tracking.backend: wandb, unless the job's environment "
        "already has WANDB_MODE or WANDB_API_KEY (offline: a site without a W&B server; `wandb sync` later)")


SIZE_RE = re.compile(r"\A([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|B)?\Z", re.IGNORECASE)


def parse_size(value: Any) -> int:
    """'500G', '1.5T', '200MiB' or a byte count -> bytes (powers of 1024)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = SIZE_RE.fullmatch(str(value).strip())
    if not match:
        raise ValueError("write a size such as 500G, 1.5T or 200M")
    unit = (match.group(2) or "B").upper()[0]
    return int(float(match.group(1)) * 1024 ** "BKMGT".index(unit))


class SiteDataConfig(_Strict):
    """Where object-store datasets (run.yaml `data: [{src: ...}]`) are cached, and how the store is reached."""

    endpoint_url: str | None = Field(None, description="S3 endpoint (http://host:port) of an S3-compatible store; "
                                     "unset: the provider's own (AWS S3; gs:// always goes to GCS)")
    storage_options: dict[str, str | bool] = Field(
        default_factory=dict, description="extra fsspec options of the store's client (s3fs / gcsfs), e.g. "
        "{anon: true}; never credentials (those come from the node's identity or environment)")
    node_cache_dir: str = Field("/var/cache/slurmctl/data", description="node-local cache directory (local NVMe/SSD); "
                                "{node} is replaced by the node's name where several nodes share one host")
    node_cache_budget: str = Field("100G", description="bytes the node cache may hold (per node), e.g. 500G")
    shared_cache_dir: str | None = Field(None, description="shared-filesystem tier (`cache: shared`); unset: refused")
    shared_cache_budget: str | None = Field(None, description="bytes the shared tier may hold (one budget for the "
                                            "whole shared directory), e.g. 2T; unset: node_cache_budget")
    public_sources: list[str] = Field(
        default_factory=list, description="object-store prefixes every user may read: their cache entries are shared "
        "between users (verified by every reader); everything else is cached per user, owner only")
    verify_on_reuse: bool = Field(True, description="re-hash every cached object before a job uses it (size and "
                                  "stored digest); false: size, owner and mode only")
    user_cache_share: float = Field(0.5, gt=0, le=1, description="the most of a cache's budget one user's bytes "
                                    "count for when another user makes room: one user holding more (a big "
                                    "dataset, or files written into their own cache directory) never refuses "
                                    "another user's staging; 1: every user counts in full")
    connect_timeout: str = Field("10s", description="staging and the submit check: how long to wait for the store "
                                 "to accept a connection, e.g. 10s")
    read_timeout: str = Field("60s", description="staging: how long one request may wait for the store's answer")
    staging_timeout: str = Field("2h", description="staging: the most one job's staging step may take on a node "
                                 "before it stops and says why (the training does not start), e.g. 90m")

    @field_validator("connect_timeout", "read_timeout", "staging_timeout")
    @classmethod
    def _duration(cls, v: str) -> str:
        seconds = parse_seconds(v)
        if seconds <= 0:
            raise ValueError("write a duration above zero, such as 30s, 10m or 2h")
        return v

    @property
    def connect_seconds(self) -> float:
        return parse_seconds(self.connect_timeout)

    @property
    def read_seconds(self) -> float:
        return parse_seconds(self.read_timeout)

    @property
    def staging_seconds(self) -> float:
        return parse_seconds(self.staging_timeout)

    @field_validator("node_cache_budget", "shared_cache_budget")
    @classmethod
    def _budget(cls, v: str | None) -> str | None:
        if v is not None:
            parse_size(v)
        return v

    @property
    def node_cache_bytes(self) -> int:
        return parse_size(self.node_cache_budget)

    @property
    def shared_cache_bytes(self) -> int:
        return parse_size(self.shared_cache_budget or self.node_cache_budget)

    def client_options(self, src: str, *, connect: float | None = None, read: float | None = None,
                       attempts: int | None = None) -> dict:
        """fsspec storage options for `src` (s3fs takes the endpoint in client_kwargs; gcsfs needs none),
        with timeouts: a store that accepts connections and never answers must not hold a job or a
        submit for botocore's defaults (60 s a read, retried). `connect`/`read`/`attempts` override the
        site's (the submit check waits seconds, not minutes)."""
        options: dict = dict(self.storage_options)
        connect = self.connect_seconds if connect is None else connect
        read = self.read_seconds if read is None else read
        if src.startswith("s3://"):
            if self.endpoint_url:
                options["client_kwargs"] = {"endpoint_url": self.endpoint_url}
            config = {"connect_timeout": connect, "read_timeout": read}
            if attempts is not None:
                config["retries"] = {"max_attempts": attempts, "mode": "standard"}
            options["config_kwargs"] = config
        elif src.startswith("gs://"):
            options["timeout"] = read  # gcsfs: each request's total time
        return options

    def is_public(self, src: str) -> bool:
        return any(src == p.rstrip("/") or src.startswith(p.rstrip("/") + "/") for p in self.public_sources)


class SiteConfig(_Strict):
    """site.yaml: what an admin writes once per cluster."""

    cluster: str
    runs_root: str = "~/slurmctl/runs"
    account: str | None = None
    partitions: dict[str, PartitionConfig]
    smoke_partition: str | None = None
    python: str = Field("python3", description="python with torch and slurmctl on compute nodes")
    cpus_per_gpu: int = Field(2, ge=1)
    drain_margin_seconds: int = Field(120, ge=10, description="USR1 this long before the time limit")
    secrets_file: str = "~/.config/slurmctl/secrets.env"
    nccl_env: dict[str, str] = Field(default_factory=dict)
    sbatch_templates_dir: str | None = None
    accounting: AccountingConfig = Field(default_factory=AccountingConfig)
    tracking: SiteTrackingConfig = Field(default_factory=SiteTrackingConfig)
    containers: ContainersConfig = Field(default_factory=ContainersConfig)
    data: SiteDataConfig = Field(default_factory=SiteDataConfig)
    cost_confirm_threshold: float | None = Field(
        None, ge=0, description="worst-case $ above which submit asks to confirm (--yes)")
    require_smoke: bool = Field(
        False, description="first full submit needs a passed `submit --smoke` of the same code+config")
    share_runs_with_group: bool = Field(False, description="run dirs 0750 / files 0640: the group of each user's runs "
                                        "directory (set by the operator, setgid) may read runs; default owner only")
    smoke_time_limit: str = Field("10m", description="time limit of `submit --smoke` jobs")
    gpu_memory_gb: dict[str, float] = Field(default_factory=dict,
                                            description="GPU memory per GPU model (overrides built-ins)")
    # node hooks and the orphan sweeper
    cost_records_dir: str = Field("/var/spool/slurmctl/cost-records",
                                  description="spool of per-attempt cost records (epilog)")
    smoke_verdicts_dir: str = Field("/var/spool/slurmctl/smoke-verdicts",
                                    description="root's record of passed smoke jobs (epilog); the require_smoke "
                                    "gate trusts only it")
    dev_allocation_ttl: str = Field("8h", description="`slurmctl cleanup` releases dev-partition jobs running longer")
    ssh_upload_max_mb: float = Field(200, gt=0, description="through an SSH login node, submit uploads at most this "
                                     "much of the workdir (after .gitignore and .slurmctlignore)")
    # live health (slurmctl/runtime/health.py enforces it inside the job, from the watchdog sidecar)
    idle_action: Literal["warn", "drain"] = Field(
        "warn", description="a job holding GPUs with no training step (or, where nvidia-smi exists, every GPU "
        "under 5% busy) for idle_grace: warn (status, alert) or drain it (checkpoint, stop, not requeued)")
    idle_grace: str = Field("30m", description="how long an allocation may sit idle before idle_action applies "
                            "('30m', '2h'; a bare number is minutes)")

    @field_validator("idle_grace", mode="before")
    @classmethod
    def _idle_grace(cls, v: Any) -> str:
        if parse_duration(v) < 1:
            raise ValueError("must be at least one second, e.g. '30m'")
        return str(v)

    @model_validator(mode="after")
    def _smoke(self) -> SiteConfig:
        if self.smoke_partition and self.smoke_partition not in self.partitions:
            raise ValueError(f"smoke_partition '{self.smoke_partition}' is not one of partitions")
        return self

    @property
    def runs_root_path(self) -> Path:
        return Path(os.path.expanduser(self.runs_root))


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One readable paragraph: each bad field, the value given and what is expected."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for i, p in enumerate(err["loc"])
                       if not (p in _UNION_TAGS and i > 0 and isinstance(err["loc"][i - 1], int)))
        if err["type"] == "missing":
            parts.append(f"`{loc}` is missing")
            continue
        if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):  # a model's / a dataclass's
            parts.append(f"`{loc}` is not a known field (check the spelling)")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = repr(value) if not isinstance(value, dict) else "a mapping"
        parts.append(f"`{loc}` = {shown}: {msg}")
    return f"{source} is invalid: " + "; ".join(parts) + "."


def _field_hint(model: type[BaseModel], exc: ValidationError) -> str:
    hints = []
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else ""
        field = model.model_fields.get(name)
        if field is not None and field.description:
            hints.append(f"`{name}`: {field.description}")
    hints = list(dict.fromkeys(hints))
    return "Fix: " + "; ".join(hints) + "." if hints else "Fix the fields named above."


def _load_yaml(path: Path, what: str, error: type[Exception]) -> dict:
    try:
        # Non-blocking open, regular files only, capped: a FIFO or /dev/zero named as run.yaml
        # fails at once instead of hanging `submit`.
        raw = read_capped(path, MAX_YAML_BYTES + 1, nofollow=False)
    except FileNotFoundError:
        raise error(f"{what} not found: {path}.", "Check the path; `slurmctl init NAME` writes a run.yaml.") from None
    except UnsafeFile as exc:
        raise error(f"{what} {path} is {exc.kind}, not a regular file.",
                    "Pass the path of a YAML file.") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}.", "Check the file's permissions.") from None
    if len(raw) > MAX_YAML_BYTES:
        raise error(f"{what} {path} is larger than {MAX_YAML_BYTES // 1024} KiB.",
                    "A run spec is a few dozen lines; check that the path names the right file.")
    try:
        data = bounded_safe_load(raw.decode("utf-8", errors="replace"))
    except YAMLTooLarge as exc:
        raise error(f"{path} is refused: {exc}.",
                    "Write the values out (a few anchors are fine; aliases inside aliases are not).") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise error(f"{path} is not valid YAML{at}: {problem}.",
                    "Fix the YAML syntax (indentation, a missing ':' or an unclosed quote).") from None
    if not isinstance(data, dict):
        raise error(f"{path} must be a YAML mapping of fields (name:, entrypoint:, ...), not {type(data).__name__}.",
                    "A batch script (#!/bin/bash, #SBATCH lines) runs as it is with `slurmctl adopt SCRIPT`; "
                    "for a run.yaml, see `slurmctl init NAME` for an example.")
    return data


def load_run_spec(path: Path) -> RunSpec:
    data = _load_yaml(path, "run spec", SpecError)
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, str(path)), _field_hint(RunSpec, exc)) from None


def load_site_config(path: Path | None = None) -> SiteConfig:
    path = path or find_site_config()
    data = _load_yaml(path, "site config", ConfigError)
    try:
        return SiteConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path)), _field_hint(SiteConfig, exc)) from None
