#!/usr/bin/env python3
"""Test clients for rdv-relay-bridge that no one on the team wrote the
protocol side of: an SSE / NDJSON reader on the standard library, a WebSocket
subscriber (websocket-client) and MQTT clients (paho-mqtt).

Every command prints machine-readable lines on stdout:
  OPEN / SUBSCRIBED   when the subscription is in place (tests wait for it)
  MSG <json>          one received ntfy message (SSE / WS / JSON)
  PAYLOAD <hex>       one received MQTT payload (with --hex)
  DONE <json>         a summary at the end
Every loop is bounded by --count and --timeout.
"""
import argparse
import hashlib
import json
import sys
import threading
import time
import urllib.request


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def sse(args):
    req = urllib.request.Request(args.url, headers={"Accept": "text/event-stream"})
    got = 0
    deadline = time.time() + args.timeout
    with urllib.request.urlopen(req, timeout=args.timeout) as r:
        event = "message"
        for raw in r:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                m = json.loads(line[6:])
                if event == "open" or m.get("event") == "open":
                    out("OPEN")
                elif m.get("event") == "message":
                    got += 1
                    out("MSG " + json.dumps(m))
                event = "message"
            if got >= args.count or time.time() > deadline:
                break
    out("DONE " + json.dumps({"count": got}))


def ndjson(args):
    got = 0
    deadline = time.time() + args.timeout
    with urllib.request.urlopen(args.url, timeout=args.timeout) as r:
        for raw in r:
            m = json.loads(raw)
            if m.get("event") == "open":
                out("OPEN")
            elif m.get("event") == "message":
                got += 1
                out("MSG " + json.dumps(m))
            if got >= args.count or time.time() > deadline:
                break
    out("DONE " + json.dumps({"count": got}))


def ws(args):
    import websocket

    conn = websocket.create_connection(args.url, timeout=args.timeout)
    got = 0
    deadline = time.time() + args.timeout
    try:
        while got < args.count and time.time() < deadline:
            m = json.loads(conn.recv())
            if m.get("event") == "open":
                out("OPEN")
            elif m.get("event") == "message":
                got += 1
                out("MSG " + json.dumps(m))
    finally:
        conn.close()
    out("DONE " + json.dumps({"count": got}))


def mqtt_client(args, client_id):
    import paho.mqtt.client as mqtt

    proto = mqtt.MQTTv5 if args.protocol == "5" else mqtt.MQTTv311
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=proto,
        transport=args.transport,
    )
    if args.transport == "websockets":
        c.ws_set_options(path="/mqtt")
    return c


def payload_for(args, i):
    if args.size:
        body = (b"%08d:" % i) + bytes((i * 7 + k) % 256 for k in range(args.size - 9))
        return body
    return b"msg-%d" % i


def mqtt_pub(args):
    c = mqtt_client(args, "paho-pub-%d" % time.time_ns())
    c.connect(args.host, args.port)
    c.loop_start()
    infos = []
    for i in range(args.count):
        infos.append(c.publish(args.topic, payload_for(args, i), qos=args.qos))
    deadline = time.time() + args.timeout
    for info in infos:
        info.wait_for_publish(max(0.1, deadline - time.time()))
    ok = all(i.is_published() for i in infos)
    c.disconnect()
    c.loop_stop()
    out("DONE " + json.dumps({"published": args.count, "acked": ok}))


def mqtt_sub(args):
    c = mqtt_client(args, "paho-sub-%d" % time.time_ns())
    lock = threading.Lock()
    state = {"count": 0, "digests": set(), "dups": 0}
    done = threading.Event()

    def on_connect(client, userdata, flags, rc, props=None):
        client.subscribe(args.topic, qos=args.qos)

    def on_subscribe(client, userdata, mid, rcs, props=None):
        out("SUBSCRIBED")

    def on_message(client, userdata, msg):
        with lock:
            d = hashlib.sha256(msg.payload).hexdigest()
            if d in state["digests"]:
                state["dups"] += 1
            state["digests"].add(d)
            state["count"] += 1
            if args.hex:
                out("PAYLOAD " + msg.payload.hex())
            if state["count"] >= args.count:
                done.set()

    c.on_connect = on_connect
    c.on_subscribe = on_subscribe
    c.on_message = on_message
    c.connect(args.host, args.port)
    c.loop_start()
    done.wait(args.timeout)
    c.disconnect()
    c.loop_stop()
    out("DONE " + json.dumps({"count": state["count"], "unique": len(state["digests"]), "dups": state["dups"]}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("sse", "json", "ws"):
        s = sub.add_parser(name)
        s.add_argument("url")
        s.add_argument("--count", type=int, default=1)
        s.add_argument("--timeout", type=float, default=30)
    for name in ("mqtt-pub", "mqtt-sub"):
        s = sub.add_parser(name)
        s.add_argument("--host", default="127.0.0.1")
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--topic", required=True)
        s.add_argument("--count", type=int, default=1)
        s.add_argument("--qos", type=int, default=1)
        s.add_argument("--size", type=int, default=0)
        s.add_argument("--timeout", type=float, default=60)
        s.add_argument("--protocol", choices=["311", "5"], default="311")
        s.add_argument("--transport", choices=["tcp", "websockets"], default="tcp")
        s.add_argument("--hex", action="store_true")
    a = p.parse_args()
    {"sse": sse, "json": ndjson, "ws": ws, "mqtt-pub": mqtt_pub, "mqtt-sub": mqtt_sub}[a.cmd](a)


if __name__ == "__main__":
    main()
