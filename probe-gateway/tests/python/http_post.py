"""Posts a body with the stdlib's http.client, as an integrator's script
would, and reports what came back, for tests/inbound_http.rs.

    http_post.py HOST PORT PATH TOKEN SIZE TRIES [expect-continue]

Each try opens a fresh connection, sends SIZE bytes to PATH with
`Authorization: Bearer TOKEN` (and `Expect: 100-continue` when asked) and
reads the answer. Prints a JSON list, one result per try:
{"status": int, "body": str} or {"error": "<exception name>: <text>"}.
"""

import http.client
import json
import sys


def main():
    host, port, path, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    size, tries = int(sys.argv[5]), int(sys.argv[6])
    expect = len(sys.argv) > 7 and sys.argv[7] == "expect-continue"
    body = b"a" * 74 + b"\r\n"
    body = (body * (size // len(body) + 1))[:size]
    out = []
    for _ in range(tries):
        c = http.client.HTTPConnection(host, port, timeout=30)
        try:
            headers = {
                "Authorization": f"Bearer {token}",
                "Content-Type": "message/rfc822",
                "Content-Length": str(len(body)),
            }
            if expect:
                # http.client does not wait for 100 Continue: send the
                # headers, read the early answer, send nothing more.
                c.putrequest("POST", path)
                for k, v in headers.items():
                    c.putheader(k, v)
                c.putheader("Expect", "100-continue")
                c.endheaders()
            else:
                c.request("POST", path, body=body, headers=headers)
            r = c.getresponse()
            out.append({"status": r.status, "body": r.read().decode("utf-8", "replace")})
        except Exception as e:  # the test reports every failure as data
            out.append({"error": f"{type(e).__name__}: {e}"})
        finally:
            c.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
