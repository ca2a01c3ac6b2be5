"""The web view's request handling, separate from the socket: `WebApp.handle(method, target, headers,
body)` returns a Response, so every route and refusal is testable in-process and the server
(web/server.py) stays a thin ThreadingHTTPServer.

Access: the one-time token (then the session cookie) of web/auth.py, else 403. A researcher's server
runs as that researcher and looks runs up through rundir's registry, which resolves the caller's runs
only (another user's run id is a 404). The operator's server (root) shows every user's runs read-only:
no cancel. HTML comes from jinja2 templates with autoescape on; charts are SVG images.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from urllib.parse import parse_qs, urlencode, urlsplit

import jinja2

from slurmctl.control.cancel import cancel_run
from slurmctl.errors import NotAllowed, RunNotFound, RunNotOwned, SlurmctlError, SlurmUnreachable, SpecError
from slurmctl.observe.charts import Chart, Series, line_chart
from slurmctl.rundir import Run, RunRegistry, is_run_id
from slurmctl.web import pages
from slurmctl.web.auth import Sessions
from slurmctl.web.series import run_charts

HTML = "text/html; charset=utf-8"
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
_USER_RE = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_METRIC_RE = re.compile(r"[A-Za-z0-9_./-]{1,64}")
MAX_BODY = 16 * 1024


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = HTML
    headers: dict[str, str] = field(default_factory=dict)


class WebApp:
    def __init__(self, ctx, sessions: Sessions, *, operator: bool = False, cancel_timeout: float = 300.0):
        self.ctx, self.sessions, self.operator = ctx, sessions, operator
        self.cancel_timeout = cancel_timeout
        self.cancels: dict[str, dict] = {}  # run id -> the drain/cancel in progress or done (this server's)
        self._lock = threading.Lock()
        self.env = jinja2.Environment(loader=jinja2.PackageLoader("slurmctl.web", "templates"),
                                      autoescape=True, undefined=jinja2.StrictUndefined)
        self.env.globals.update(operator=operator, user=ctx.registry.user if not operator else "root (operator)")

    # --- entry point ---------------------------------------------------------------------------
    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes = b"") -> Response:
        url = urlsplit(target)
        query = {k: v for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            if "token" in query:  # the printed URL: spend the token, keep the session in a cookie
                session = self.sessions.exchange(query["token"][0])
                if session is None:
                    raise NotAllowed("this token was already used or is wrong")
                rest = {k: v for k, v in query.items() if k != "token"}
                location = url.path + (f"?{urlencode(rest, doseq=True)}" if rest else "")
                return Response(303, b"", headers={"Location": location,
                                                   "Set-Cookie": self.sessions.set_cookie(session)})
            session = self.sessions.session_of(headers.get("Cookie"))
            if session is None:
                raise NotAllowed("no valid session")
            return self._route(method, url.path, query, body, session)
        except NotAllowed as exc:
            return self._page("error.html", 403, title="Not allowed", message=f"403: {exc}.",
                              hint="Open the URL with the token that `slurmctl web` printed (each token works "
                                   "once), in the browser you used it in.")
        except (RunNotFound, RunNotOwned) as exc:
            return self._page("error.html", 404, title="Not found", message=exc.message, hint=exc.hint or "")
        except SlurmctlError as exc:
            status = 503 if isinstance(exc, SlurmUnreachable) else 400
            return self._page("error.html", status, title="Error", message=exc.message, hint=exc.hint or "")
        except Exception as exc:  # noqa: BLE001 - one request fails, the server goes on; no traceback in the page
            print(f"slurmctl web: internal error on {method} {url.path}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return self._page("error.html", 500, title="Internal error", message=f"{type(exc).__name__}: {exc}",
                              hint="Reload; if it persists, run the matching CLI command with --debug and report it.")

    def _route(self, method: str, path: str, query: dict, body: bytes, session: str) -> Response:
        parts = [p for p in path.split("/") if p]
        one = lambda name, default="": (query.get(name) or [default])[0]  # noqa: E731
        if method == "POST":
            form = parse_qs(body[:MAX_BODY].decode(errors="replace"))
            if not self.sessions.csrf_ok(session, (form.get("csrf") or [None])[0]):
                raise NotAllowed("the form's CSRF value is missing or wrong")
            if len(parts) == 3 and parts[0] == "run" and parts[2] == "cancel":
                return self._start_cancel(self._run(parts[1], one("user")))
            raise RunNotFound(f"no such page: POST {path}", "")
        if method not in {"GET", "HEAD"}:
            raise NotAllowed(f"method {method} is not served")
        if not parts:
            return self._runs(query, one)
        if parts[0] == "static" and len(parts) == 2:
            return self._static(parts[1])
        if parts[0] == "queue" and len(parts) == 1:
            return self._page("queue.html", title="Queue", **pages.queue_page(
                self.ctx, one("partition"), one("user"), one("state")), q={k: one(k) for k in ("partition", "user",
                                                                                                 "state")})
        if parts[0] == "compare":
            return self._compare(parts[1:], query, one)
        if parts[0] == "showback" and parts[1:] in ([], ["chart.svg"]):
            if not self.operator:
                raise NotAllowed("showback is the operator's page (run `slurmctl web` as root)")
            by = one("by", "account") if one("by", "account") in {"account", "user", "partition", "gpu", "run"} \
                else "account"
            days = max(1, min(int(one("days", "7")) if one("days", "7").isdigit() else 7, 366))
            data = pages.showback_page(self.ctx, by, days)
            if parts[1:] == ["chart.svg"]:
                if data["report"] is None:
                    raise RunNotFound("no cost ledger yet", "")

                return Response(200, line_chart(pages.showback_chart(data["report"], by), "svg"), "image/svg+xml",
                                {"Cache-Control": "no-store"})
            return self._page("showback.html", title="Showback", by=by, days=days, **data)
        if parts[0] == "nodes" and len(parts) == 1:
            if not self.operator:
                raise NotAllowed("nodes is the operator's page (run `slurmctl web` as root)")
            return self._page("nodes.html", title="Nodes", **pages.nodes_page(self.ctx))
        if parts[0] == "run" and len(parts) >= 2:
            run = self._run(parts[1], one("user"))
            return self._run_route(run, parts[2:], query, one, session)
        raise RunNotFound(f"no such page: {path}", "Start from the Runs page.")

    # --- pages ---------------------------------------------------------------------------------
    def _runs(self, query: dict, one) -> Response:
        limit = one("n", "50")
        limit_value = None if limit == "all" else (int(limit) if limit.isdigit() and int(limit) > 0 else 50)
        sort = one("sort", "created")
        data = pages.runs_page(self.ctx, self.operator, limit_value, one("q"), one("phase"), sort,
                               one("order", "desc") != "asc")
        if one("format") == "json":
            return self._json([row.__dict__ for row in data["rows"]])
        return self._page("runs.html", title="Runs", q=one("q"), phase=one("phase"), sort=sort,
                          order=one("order", "desc"), n=limit, live=one("live", "1") == "1", **data)

    def _run_route(self, run: Run, rest: list[str], query: dict, one, session: str) -> Response:
        owner = self._owner_query(run)
        if not rest:
            data = pages.run_page(self.ctx, run, self.operator)
            if one("format") == "json":
                return self._json(data["s"].to_dict())
            return self._page("run.html", title=run.run_id, run=run, owner=owner, csrf=self.sessions.csrf(session),
                              cancel=self._cancel_state(run.run_id), **data)
        if rest == ["log"]:
            rank = one("rank", "0")
            if rank != "all" and not rank.isdigit():
                raise SpecError(f"rank {rank!r} is not a rank.", "Pass a rank number (0, 1, ...) or 'all'.")
            lines = one("lines", "200")
            return self._json(pages.log_tail(run, rank, min(int(lines), 2000) if lines.isdigit() else 200))
        if len(rest) == 2 and rest[0] == "chart" and rest[1] in {"loss.svg", "throughput.svg"}:
            chart = run_charts(run)[rest[1].removesuffix(".svg")]
            return Response(200, line_chart(chart, "svg"), "image/svg+xml", {"Cache-Control": "no-store"})
        if rest == ["cancel"]:
            if self.operator:
                raise NotAllowed("the operator's view is read-only")
            return self._page("cancel.html", title=f"Cancel {run.run_id}?", run=run, owner=owner,
                              csrf=self.sessions.csrf(session))
        if rest == ["cancel.json"]:
            return self._json(self._cancel_state(run.run_id))
        raise RunNotFound(f"no such page for run {run.run_id}: {'/'.join(rest)}", "")

    def _compare(self, rest: list[str], query: dict, one) -> Response:
        refs = [r for r in query.get("run", []) if r][:12]
        metric = one("metric", "loss")
        if not _METRIC_RE.fullmatch(metric):
            raise SpecError(f"metric {metric!r} is not a metric name.", "Use the name the training logs, e.g. loss.")
        users = query.get("user", [])
        runs = [self._run(ref, users[i] if i < len(users) else "") for i, ref in enumerate(refs)]
        data = pages.compare_page(runs, metric)
        if rest == ["chart.svg"]:
            chart = Chart(f"{metric} by step", metric, [Series(s.run_id, s.steps, s.losses) for s in data["series"]])
            return Response(200, line_chart(chart, "svg"), "image/svg+xml", {"Cache-Control": "no-store"})
        if rest:
            raise RunNotFound("no such page under /compare", "")
        return self._page("compare.html", title="Compare", metric=metric, chart_query=urlencode(
            [("metric", metric), *[("run", r) for r in refs], *[("user", u) for u in users]]), **data)

    # --- cancel: control/cancel in a thread, progress polled by the page ------------------------
    def _start_cancel(self, run: Run) -> Response:
        if self.operator:
            raise NotAllowed("the operator's view is read-only")
        with self._lock:
            current = self.cancels.get(run.run_id)
            if current is None or current["state"] in {"done", "error"}:
                self.cancels[run.run_id] = {"state": "draining", "message": "drain requested; waiting for the "
                                            "training to checkpoint and acknowledge", "waited": 0.0, "result": None}
                threading.Thread(target=self._cancel, args=(run,), daemon=True, name=f"cancel-{run.run_id}").start()
        return Response(303, b"", headers={"Location": f"/run/{run.run_id}#cancel"})

    def _cancel(self, run: Run) -> None:
        state = self.cancels[run.run_id]

        def progress(waited: float, heartbeat: dict | None) -> None:
            state["waited"] = round(waited, 1)
            if heartbeat and heartbeat.get("step") is not None:
                state["message"] = f"drain requested; the training is at step {heartbeat['step']}, waiting for its ACK"

        try:
            result = cancel_run(run, self.ctx.client, drain_timeout=self.cancel_timeout, progress=progress)
            state["result"] = result.to_dict()
            state["message"] = {
                "acknowledged": f"drain acknowledged at step {result.ack_step} (checkpoint saved); job "
                                f"{result.job_id} stopped (Slurm: {result.final_state.lower()})",
                "unacknowledged": f"DRAIN NOT ACKNOWLEDGED after {result.drain_seconds or 0:.0f} s: work since the "
                                  f"last checkpoint is lost; job {result.job_id} {result.final_state.lower()}",
                "not-needed": f"job {result.job_id} was not running: {result.final_state.lower()}",
            }.get(result.drain, f"job {result.job_id} {result.final_state.lower()}")
            state["state"] = "done"
        except SlurmctlError as exc:
            state["state"], state["message"] = "error", f"{exc.message} {exc.hint or ''}".strip()
        except Exception as exc:  # noqa: BLE001 - reported on the page, not lost in a thread
            state["state"], state["message"] = "error", f"{type(exc).__name__}: {exc}"

    def _cancel_state(self, run_id: str) -> dict | None:
        state = self.cancels.get(run_id)
        return dict(state) if state else None

    # --- helpers -------------------------------------------------------------------------------
    def _run(self, ref: str, user: str = "") -> Run:
        """The caller's run by id (never a path); the operator names the owner with ?user=."""
        if not is_run_id(ref):
            raise RunNotFound(f"'{ref}' is not a run id.", "Pick a run on the Runs page.")
        if not self.operator:
            return self.ctx.registry.get(ref)
        if not _USER_RE.fullmatch(user or ""):
            raise RunNotFound("the operator's run links name the run's owner (?user=).", "Pick a run on the Runs page.")
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            raise RunNotFound(f"no user {user!r} on this machine.", "Pick a run on the Runs page.") from None
        return RunRegistry(self.ctx.registry.runs_root, user, uid=uid).get(ref)

    def _owner_query(self, run: Run) -> str:
        return f"?user={run.path.parent.name}" if self.operator else ""

    def _static(self, name: str) -> Response:
        suffix = os.path.splitext(name)[1]
        if suffix not in STATIC_TYPES or not re.fullmatch(r"[a-z0-9_-]+\.[a-z]+", name):
            raise RunNotFound(f"no static file {name!r}", "")
        data = resources.files("slurmctl.web").joinpath("static", name).read_bytes()
        return Response(200, data, STATIC_TYPES[suffix], {"Cache-Control": "max-age=300"})

    def _json(self, data) -> Response:
        return Response(200, json.dumps(data, default=str).encode(), "application/json",
                        {"Cache-Control": "no-store"})

    def _page(self, template: str, status: int = 200, **values) -> Response:
        values.setdefault("now", time.strftime("%H:%M:%S"))
        body = self.env.get_template(template).render(**values).encode()
        return Response(status, body, HTML, {"Cache-Control": "no-store"})
