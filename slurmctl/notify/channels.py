"""Where a message goes and how it gets there: apprise for email and chat, a signed POST of our own.

A channel is named in run.yaml (or the user's config) by a KEY of the user's 0600 secrets file; the
value there is the destination URL, read at send time, as the user (runtime/secrets.py's checks:
the file must be the caller's own and unreadable by others). Nothing else ever sees the URL: the
journal (notifications.jsonl), status and the web page show the key and the kind only.

* ``mailto://`` / ``mailtos://`` -- email through SMTP (apprise's email plugin); every message of a
  run carries the same In-Reply-To/References, so it is one thread.
* ``https://hooks.slack.com/services/...``, ``slack://``, ``mmost://`` (Mattermost's Slack-compatible
  incoming webhooks), ``json://``, and every other apprise scheme -- through apprise.
* ``signed+http://`` / ``signed+https://HOST/PATH?secret=S`` -- a generic webhook: the message as
  JSON, POSTed to http(s)://HOST/PATH with ``X-Slurmctl-Timestamp: T`` and ``X-Slurmctl-Signature:
  sha256=<hex HMAC-SHA256(S, "T." + body)>`` (the scheme Slack and Stripe sign with; the receiver
  recomputes it, compares in constant time and refuses old timestamps). ``secret`` never leaves.
  apprise has no signing, so this one is ours (standard library: urllib, hmac).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from slurmctl.errors import PreflightError
from slurmctl.runtime.secrets import check_secrets_file, parse_secrets_file

SIGNED_SCHEMES = ("signed+http", "signed+https")
SIGNATURE_HEADER = "X-Slurmctl-Signature"
TIMESTAMP_HEADER = "X-Slurmctl-Timestamp"
SEND_TIMEOUT_SECONDS = 15


@dataclass(frozen=True)
class Channel:
    key: str  # the secrets-file key: what the journal and status show
    url: str  # the destination (a secret): never printed, logged or recorded

    @property
    def kind(self) -> str:
        scheme = self.url.split(":", 1)[0].lower()
        if scheme in SIGNED_SCHEMES:
            return "signed-webhook"
        if scheme in ("mailto", "mailtos"):
            return "email"
        if scheme in ("slack", "mmost", "mmosts") or "hooks.slack.com" in self.url:
            return "slack"
        return scheme or "unknown"


def resolve_channels(keys: list[str], secrets_file: Path) -> tuple[list[Channel], list[str]]:
    """(channels, problems): each key's URL from the secrets file; a problem names the key, never a value."""
    if not keys:
        return [], []
    try:
        check_secrets_file(secrets_file, [])  # exists, is the caller's own, readable by nobody else
        values = parse_secrets_file(secrets_file)
    except PreflightError as exc:
        return [], [exc.message]
    except OSError as exc:
        return [], [f"secrets file {secrets_file}: {exc.strerror}"]
    channels, problems = [], []
    for key in keys:
        if key in values and values[key]:
            channels.append(Channel(key, values[key]))
        else:
            problems.append(f"channel {key}: no {key}=URL in {secrets_file}")
    return channels, problems


def sign(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify(secret: str, timestamp: str, body: bytes, signature: str, max_age: float = 300.0,
           now: float | None = None) -> bool:
    """What a receiver runs: the signature matches and the timestamp is recent (no replay)."""
    try:
        age = abs((now if now is not None else time.time()) - float(timestamp))
    except ValueError:
        return False
    return age <= max_age and hmac.compare_digest(sign(secret, timestamp, body), signature)


def _send_signed(url: str, payload: dict) -> None:
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    secret = next((v for k, v in query if k == "secret"), "")
    if not secret:
        raise ValueError("a signed webhook URL needs ?secret=...")
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "secret"])
    target = urllib.parse.urlunsplit((parts.scheme.removeprefix("signed+"), parts.netloc, parts.path, rest, ""))
    body = json.dumps(payload, sort_keys=True).encode()
    timestamp = str(int(time.time()))
    request = urllib.request.Request(target, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "slurmctl-notify",
        TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(secret, timestamp, body)})
    with urllib.request.urlopen(request, timeout=SEND_TIMEOUT_SECONDS) as response:  # noqa: S310 - the user's URL
        if response.status >= 300:
            raise OSError(f"HTTP {response.status}")


def _send_apprise(url: str, title: str, body: str) -> None:
    import apprise

    sender = apprise.Apprise()
    if not sender.add(url):
        raise ValueError("apprise does not understand this URL (check its scheme)")
    if not sender.notify(title=title, body=body, body_format=apprise.NotifyFormat.TEXT):
        raise OSError("apprise could not deliver it (see the channel's own error above)")


def email_thread(url: str, thread: str) -> str:
    """The email URL with In-Reply-To/References naming the run (apprise's `+Header=` arguments): mail
    clients then show every message about one run as one thread."""
    reference = urllib.parse.quote(f"<{thread}@slurmctl>")
    return f"{url}{'&' if '?' in url else '?'}+In-Reply-To={reference}&+References={reference}"


def send(channel: Channel, title: str, body: str, payload: dict, thread: str = "") -> str | None:
    """Deliver one message; None when it went, else why not (without the URL). `thread`: the run id
    that groups the messages where the channel has threads (email)."""
    try:
        if channel.kind == "signed-webhook":
            _send_signed(channel.url, payload)
        else:
            url = email_thread(channel.url, thread) if channel.kind == "email" and thread else channel.url
            _send_apprise(url, title, body)
    except ImportError:
        return "apprise is not installed (pip install 'slurmctl[notify]')"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except Exception as exc:  # noqa: BLE001 - one channel failing must not stop the others
        text = str(exc).replace(channel.url, "<url>")  # apprise may echo the URL, credentials and all
        return f"{type(exc).__name__}: {text}"[:300]
    return None
