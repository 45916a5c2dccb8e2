"""Opens the gateway's pages in a real headless Chromium, JavaScript off,
over the DevTools protocol (websocket-client), for tests/pages.rs.

    browser_pages.py CHROMIUM OUT_DIR EXPLAINER_URL OPTOUT_URL

For each viewport (phone 390x844, desktop 1280x800) it loads the explainer
and the opt-out page, saves a full-page screenshot to OUT_DIR, and measures
what decides readability: the layout width against the viewport (no
sideways scrolling), the computed font size of the body text, the button's
box. Then, on the phone, it clicks the opt-out button with a real mouse
event and reads the page the form POST leads to. Prints one JSON object.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import websocket

VIEWPORTS = {"phone": (390, 844, True), "desktop": (1280, 800, False)}
TIMEOUT = 30.0


class Page:
    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=TIMEOUT, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)
        raise RuntimeError(f"{method}: no answer")

    def wait_event(self, name):
        deadline = time.monotonic() + TIMEOUT
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == name:
                    del self.events[: i + 1]
                    return e
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {name}")
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)

    def load(self, url):
        self.events.clear()
        nav = self.call("Page.navigate", url=url)
        if nav.get("errorText"):
            raise RuntimeError(f"{url}: {nav['errorText']}")
        self.wait_event("Page.loadEventFired")

    def node(self, selector):
        root = self.call("DOM.getDocument", depth=-1)["root"]["nodeId"]
        return self.call("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]

    def count(self, selector):
        root = self.call("DOM.getDocument", depth=-1)["root"]["nodeId"]
        return len(self.call("DOM.querySelectorAll", nodeId=root, selector=selector)["nodeIds"])

    def style(self, selector, prop):
        nid = self.node(selector)
        if not nid:
            return None
        for p in self.call("CSS.getComputedStyleForNode", nodeId=nid)["computedStyle"]:
            if p["name"] == prop:
                return p["value"]
        return None

    def box(self, selector):
        nid = self.node(selector)
        if not nid:
            return None
        q = self.call("DOM.getBoxModel", nodeId=nid)["model"]["border"]
        xs, ys = q[0::2], q[1::2]
        return {"x": min(xs), "y": min(ys), "width": max(xs) - min(xs), "height": max(ys) - min(ys)}

    def text(self):
        root = self.call("DOM.getDocument", depth=-1)["root"]["nodeId"]
        return self.call("DOM.getOuterHTML", nodeId=root)["outerHTML"]

    def measure(self, name, out_dir):
        m = self.call("Page.getLayoutMetrics")
        content = m["cssContentSize"]
        viewport = m["cssLayoutViewport"]
        shot = self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": viewport["clientWidth"],
                  "height": max(content["height"], viewport["clientHeight"]), "scale": 1},
        )
        path = os.path.join(out_dir, f"{name}.png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        return {
            "screenshot": path,
            "content_width": content["width"],
            "viewport_width": viewport["clientWidth"],
            "body_font_px": float((self.style("p", "font-size") or "0px").rstrip("px")),
            "h1_font_px": float((self.style("h1", "font-size") or "0px").rstrip("px")),
            "button": self.box("button"),
            "scripts": self.count("script"),
            "html": self.text(),
        }


def main():
    chromium, out_dir, explainer, optout = sys.argv[1:5]
    os.makedirs(out_dir, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="rdv-chromium-")
    proc = subprocess.Popen(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--blink-settings=scriptEnabled=false",
            f"--user-data-dir={profile}", "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1", "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + TIMEOUT
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = open(port_file).read().split("\n")[0].strip()
        browser = Page(f"ws://127.0.0.1:{port}" + open(port_file).read().split("\n")[1].strip())
        target = browser.call("Target.createTarget", url="about:blank")["targetId"]
        page = Page(f"ws://127.0.0.1:{port}/devtools/page/{target}")
        for d in ("Page", "DOM", "CSS"):
            page.call(f"{d}.enable")
        # Belt and braces: the flag above switches scripts off for the
        # whole browser; this switches them off for the page too.
        page.call("Emulation.setScriptExecutionDisabled", value=True)
        out = {}
        for vname, (w, h, mobile) in VIEWPORTS.items():
            page.call("Emulation.setDeviceMetricsOverride", width=w, height=h,
                      deviceScaleFactor=1, mobile=mobile)
            for pname, url in (("explainer", explainer), ("optout", optout)):
                page.load(url)
                out[f"{pname}_{vname}"] = page.measure(f"{pname}-{vname}", out_dir)
        # The confirm button, clicked like a person would, on the phone.
        page.call("Emulation.setDeviceMetricsOverride", width=390, height=844,
                  deviceScaleFactor=1, mobile=True)
        page.load(optout)
        b = page.box("button")
        x, y = b["x"] + b["width"] / 2, b["y"] + b["height"] / 2
        page.events.clear()
        for kind in ("mousePressed", "mouseReleased"):
            page.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        page.wait_event("Page.loadEventFired")
        out["after_click"] = page.measure("optout-done-phone", out_dir)
        print(json.dumps(out))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
