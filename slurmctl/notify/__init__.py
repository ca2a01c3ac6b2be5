"""Messages about a run, sent as its user: email and chat through apprise, signed webhooks of our own.

``channels`` (where a message goes: the user's secrets file names the URLs), ``journal`` (deliver
once per event, rate-limited per run, journalled in notifications.jsonl), ``events`` (what each
event says, from the run directory). ``python -m slurmctl.notify EVENT`` is how the job script, the
watchdog and submit's pending watcher send; root never does (the epilog sends nothing).
"""
