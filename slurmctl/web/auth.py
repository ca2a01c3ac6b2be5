"""Who may talk to `slurmctl web`: the holder of the one-time token printed at start, then that
browser's session cookie (like Jupyter's token login).

The token is spent on first use and exchanged for a random session id in an HttpOnly,
SameSite=Strict cookie; every form that changes something (cancel) also carries the session's
CSRF value. Comparisons are constant-time. Everything else is refused with 403.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from http.cookies import CookieError, SimpleCookie

COOKIE = "slurmctl_web"
MAX_SESSIONS = 32  # a handful of browsers per user; the oldest session is dropped past this


class Sessions:
    def __init__(self, token: str | None = None, cookie_name: str = COOKIE):
        self.token: str | None = token or secrets.token_urlsafe(32)
        # Browsers share cookies between the ports of one host: the server names its cookie after its
        # port (web/server.py), so two servers (two users, or a user and the operator) do not log each other out.
        self.cookie_name = cookie_name
        self._sessions: dict[str, str] = {}  # session id -> csrf value
        self._lock = threading.Lock()

    def exchange(self, token: str) -> str | None:
        """The session id for the one-time token; None when it is wrong or already spent."""
        with self._lock:
            if self.token is None or not hmac.compare_digest(token.encode(), self.token.encode()):
                return None
            self.token = None
            return self._new_session()

    def _new_session(self) -> str:
        session = secrets.token_urlsafe(32)
        self._sessions[session] = secrets.token_urlsafe(24)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        return session

    def session_of(self, cookie_header: str | None) -> str | None:
        """The valid session named by the request's Cookie header, else None."""
        if not cookie_header:
            return None
        try:
            jar = SimpleCookie(cookie_header)
        except CookieError:
            return None
        morsel = jar.get(self.cookie_name)
        if morsel is None:
            return None
        with self._lock:
            for session in self._sessions:
                if hmac.compare_digest(morsel.value.encode(), session.encode()):
                    return session
        return None

    def csrf(self, session: str) -> str:
        with self._lock:
            return self._sessions.get(session, "")

    def csrf_ok(self, session: str, value: str | None) -> bool:
        expected = self.csrf(session)
        return bool(expected) and value is not None and hmac.compare_digest(value.encode(), expected.encode())


    def set_cookie(self, session: str) -> str:
        return f"{self.cookie_name}={session}; Path=/; HttpOnly; SameSite=Strict"
