"""`slurmctl web`: serve the web view for the user who starts it (root: the operator's read-only view)."""

from __future__ import annotations

import os
import socket

import click

from slurmctl.cli.context import Context, err, pass_ctx


@click.command()
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port (0: any free port).")
@click.option("--listen", default="127.0.0.1", show_default=True, metavar="ADDR",
              help="Address to bind. Keep the default and tunnel with the printed `ssh -L` line.")
@click.option("--cancel-timeout", default=300.0, show_default=True, type=click.FloatRange(1, 3600),
              help="Seconds the cancel button waits for the training's drain ACK.")
@pass_ctx
def web(ctx: Context, port: int, listen: str, cancel_timeout: float) -> None:
    """Serve your runs, stories, charts, queue and compare as web pages (tunnel with the printed ssh -L).

    Root gets the operator's read-only view of every user's runs and the showback page."""
    from slurmctl.errors import ConfigError
    from slurmctl.web.app import WebApp
    from slurmctl.web.auth import Sessions
    from slurmctl.web.server import make_server

    operator = os.geteuid() == 0
    sessions = Sessions()
    app = WebApp(ctx, sessions, operator=operator, cancel_timeout=cancel_timeout)
    try:
        server = make_server(app, listen, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {listen}:{port} ({exc.strerror or exc}).",
                          "Pick another --port (or --port 0 for any free one).") from None
    bound = server.server_address[1]
    host = "127.0.0.1" if listen in {"127.0.0.1", "localhost", "0.0.0.0", "::", "::1"} else listen
    login = socket.gethostname()  # not getfqdn(): a DNS lookup can hang where the resolver is unreachable
    who = "the operator's read-only view of every user's runs" if operator else f"{app.env.globals['user']}'s runs"
    click.echo(f"slurmctl web: serving {who} on {listen}:{bound}")
    if listen not in {"127.0.0.1", "localhost", "::1"}:
        err.print(f"warning: listening on {listen}, not only this machine: anyone who can reach it sees the login page "
                  "(the token still guards every page).", markup=False)
    click.echo("From your laptop, tunnel to it:")
    click.echo(f"    ssh -N -L {bound}:127.0.0.1:{bound} {os.environ.get('USER') or 'you'}@{login}")
    click.echo("then open (the token works once; the browser keeps a session cookie):")
    click.echo(f"    http://{host}:{bound}/?token={sessions.token}", nl=True)
    click.echo("Ctrl-C stops it.")
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
