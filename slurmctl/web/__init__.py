"""`slurmctl web`: the runs, one run's story with charts, the queue in plain words, compare and
showback as web pages, served from the login node (see app.py for access, server.py for serving)."""
