"""Messages about a run, sent as its user: email and chat through apprise, signed webhooks of our own.

``channels`` (where a message goes: the user's secrets file names the URLs), ``journal`` (deliver
once per event, rate-limited per run, journalled in notifications.jsonl), ``events`` (what each
event says, from the run directory). ``python -m slurmctl.notify EVENT`` is how the job script, the
watchdog and submit's pending watcher send; root never does. When the batch script itself was killed
(nothing in the job is left to send), root's epilog has a child running as the job's user record the
missing end and start the user's own ``python -m slurmctl.notify ended`` (ops/hooks/run_records.py).
"""
