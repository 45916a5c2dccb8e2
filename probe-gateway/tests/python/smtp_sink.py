"""A real SMTP server for the outbound tests (tests/outbound.rs): aiosmtpd
on 127.0.0.1, port 0.

Prints the bound port on the first stdout line, then one JSON line per
accepted message: {"mail_from", "rcpt_tos", "data_b64", "tls"} (data is the
DATA content exactly as received, dot-unstuffed). Exits when stdin closes,
so the test owns its lifetime.

Options:
  --tls CERT KEY   offer STARTTLS with this certificate and require it
                   before MAIL (aiosmtpd require_starttls)
  --reject TEXT    answer DATA with TEXT (e.g. "550 5.7.1 no thanks")
  --auth USER PASS require SMTP AUTH (PLAIN/LOGIN) with these credentials,
                   also without TLS (loopback tests only)
"""

import argparse
import asyncio
import base64
import json
import logging
import ssl
import sys
import warnings

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


class Authenticator:
    def __init__(self, user, password):
        self.user = user.encode()
        self.password = password.encode()

    def __call__(self, server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login == self.user
            and auth_data.password == self.password
        )
        return AuthResult(success=ok, handled=False)


class Sink:
    def __init__(self, reject):
        self.reject = reject

    async def handle_DATA(self, server, session, envelope):
        if self.reject:
            return self.reject
        line = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "data_b64": base64.b64encode(envelope.original_content).decode(),
            "tls": session.ssl is not None,
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        return "250 2.0.0 OK"


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--reject")
    ap.add_argument("--auth", nargs=2, metavar=("USER", "PASS"))
    args = ap.parse_args()
    # aiosmtpd logs a traceback when a client aborts the TLS handshake,
    # which some tests do on purpose.
    logging.getLogger("mail.log").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")
    ctx = None
    if args.tls:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.tls[0], args.tls[1])
    handler = Sink(args.reject)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(
            handler,
            hostname="sink.test",
            tls_context=ctx,
            require_starttls=ctx is not None,
            authenticator=Authenticator(*args.auth) if args.auth else None,
            auth_required=args.auth is not None,
            auth_require_tls=False,
        ),
        host="127.0.0.1",
        port=0,
    )
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    # Stop when the test closes our stdin (or dies).
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
