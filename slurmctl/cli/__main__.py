import sys

from slurmctl.cli.main import main

sys.exit(main())
