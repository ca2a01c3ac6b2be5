"""`python -m slurmctl ...`: the same CLI as the installed `slurmctl` command (pyproject [project.scripts])."""

import sys

from slurmctl.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
