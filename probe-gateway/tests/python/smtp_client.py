#!/usr/bin/env python3
"""A real SMTP client (stdlib smtplib) for the listener tests.

usage: smtp_client.py HOST PORT STEPS_JSON

STEPS_JSON is a list of steps; the output (stdout) is a JSON list with one
result per step: [code, text], or ["closed"] when the server hung up.
  ["ehlo", name]        -> [code, text, {"size": ..., "starttls": bool}]
  ["starttls", cafile]  STARTTLS, verifying the server against cafile
  ["helo", name]
  ["cmd", "RCPT TO:<a@b>"]  (any raw command line)
  ["data_file", path]   DATA with the message in the file (smtplib dot-stuffs)
  ["data_bytes", n]     DATA with n bytes of 76-column text
  ["wait_reply"]        send nothing; read the next reply (a stalled client)
  ["quit"]
"""
import json
import smtplib
import ssl
import sys


def main():
    host, port, steps = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    # Connecting in the constructor records the host for STARTTLS's
    # certificate check; it raises unless the greeting is 220.
    s = smtplib.SMTP(host, port, timeout=60)
    out = []
    try:
        out.append([220, "greeting"])
        for step in steps:
            op = step[0]
            try:
                if op == "ehlo":
                    code, text = s.ehlo(step[1])
                    out.append([code, text.decode("latin-1"), {"size": s.esmtp_features.get("size"), "starttls": s.has_extn("starttls")}])
                elif op == "helo":
                    code, text = s.helo(step[1])
                    out.append([code, text.decode("latin-1")])
                elif op == "starttls":
                    ctx = ssl.create_default_context(cafile=step[1])
                    code, text = s.starttls(context=ctx)
                    out.append([code, text.decode("latin-1")])
                elif op == "cmd":
                    code, text = s.docmd(step[1])
                    out.append([code, text.decode("latin-1")])
                elif op in ("data_file", "data_bytes"):
                    if op == "data_file":
                        with open(step[1], "rb") as f:
                            msg = f.read()
                    else:
                        line = b"a" * 74 + b"\r\n"
                        msg = line * (int(step[1]) // len(line) + 1)
                    try:
                        code, text = s.data(msg)
                    except smtplib.SMTPDataError as e:
                        code, text = e.smtp_code, e.smtp_error
                    out.append([code, text.decode("latin-1")])
                elif op == "wait_reply":
                    code, text = s.getreply()
                    out.append([code, text.decode("latin-1")])
                elif op == "quit":
                    code, text = s.docmd("QUIT")
                    out.append([code, text.decode("latin-1")])
                else:
                    raise SystemExit(f"unknown step {op}")
            except smtplib.SMTPServerDisconnected:
                out.append(["closed"])
                break
    finally:
        try:
            s.close()
        except Exception:
            pass
    print(json.dumps(out))


if __name__ == "__main__":
    main()
