from slurmctl.cli.main import main

main()
