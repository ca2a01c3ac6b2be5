"""The user's own settings (~/.config/slurmctl/config.yaml, or $SLURMCTL_USER_CONFIG).

Today: how to reach the cluster from a laptop through its SSH login node.

    login_host: alice@login.example.org:22   # run every Slurm command there
    ssh_key: ~/.ssh/id_ed25519               # default: ssh-agent, then ~/.ssh/id_*
    known_hosts: ~/.ssh/known_hosts
    strict_host_key_checking: true           # false only for throwaway test clusters

and where messages about every run go unless its run.yaml says otherwise (slurmctl/notify):

    notify:
      channels: [SLACK_WEBHOOK, EMAIL]       # keys of the 0600 secrets file, whose values are the URLs
      pending_after: 30m
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from slurmctl.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import BaseModel

USER_CONFIG_ENV = "SLURMCTL_USER_CONFIG"
DEFAULT_USER_CONFIG = Path("~/.config/slurmctl/config.yaml")


@cache
def _model():
    """The pydantic model, built on first use: most users have no config file, and every command
    asks for one (the read commands then never import pydantic for it)."""
    from pydantic import BaseModel, ConfigDict

    from slurmctl.config.models import NotifySpec  # why: the same reason, pydantic models

    class UserConfig(BaseModel):
        model_config = ConfigDict(extra="forbid")

        login_host: str | None = None
        ssh_key: str | None = None
        known_hosts: str = "~/.ssh/known_hosts"
        strict_host_key_checking: bool = True
        notify: NotifySpec | None = None

    return UserConfig


def user_config_path() -> Path:
    return Path(os.environ.get(USER_CONFIG_ENV) or DEFAULT_USER_CONFIG).expanduser()


def load_user_config(path: Path | None = None) -> BaseModel:  # a UserConfig
    import yaml
    from pydantic import ValidationError

    from slurmctl.config.models import format_validation_error  # why: pydantic only when a config file exists

    UserConfig = _model()  # noqa: N806 - the model class
    path = path or user_config_path()
    if not path.exists():
        return UserConfig()
    try:
        data = yaml.safe_load(path.read_text()) or {}
        return UserConfig.model_validate(data)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}.", "Fix the file or remove it.") from None
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path)),
                          "Known keys: login_host, ssh_key, known_hosts, strict_host_key_checking, notify.") from None


def login_target(host: str | None, config: BaseModel | None = None) -> tuple[str, BaseModel] | None:
    """The SSH login host to reach Slurm through (`--host`, else the config's login_host) with the
    user's settings; None means run locally (and no config file means no pydantic import)."""
    if host is None and config is None and not user_config_path().exists():
        return None
    config = config or load_user_config()
    host = host or config.login_host
    return (host, config) if host else None
