"""A Pyroscope ingest receiver on loopback, for record --push's tests and
bench/push-continuous (Python 3.7+, stdlib only).

It checks every request against the documented contract of Pyroscope's
server API (POST /ingest, query parameters name/from/until/format/
sampleRate/spyName, pprof as a multipart form with a "profile" file and a
"sample_type_config" file) and keeps what each accepted one carried. Its
behaviour can be switched while spy runs: "ok" answers 200, "fail" 500,
"hang" reads the request and answers nothing (the connection is held
until the mode changes, then closed), "down" refuses connections (the
listening socket is closed, as a stopped server's would be).

A request that breaks the contract is recorded in .problems and answered
400, so a test sees both the problem and spy's handling of a refusal.
"""

import gzip
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))
_formats = __import__("check-formats")
decode_profile = _formats.decode_profile

APP_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
VALUE_RE = re.compile(r"^[^\s{},=\"'\\\x00-\x1f\x7f]{1,255}$")
REQUIRED = ("name", "from", "until", "format", "sampleRate", "spyName")


def parse_name(name):
    """'app{k=v,...}' -> (app, {k: v}); ValueError naming what is wrong."""
    m = re.match(r"^([^{}]*)\{(.*)\}$", name)
    if not m:
        raise ValueError("name %r is not app{k=v,...}" % name)
    app, body = m.group(1), m.group(2)
    if not APP_RE.match(app):
        raise ValueError("application name %r breaks the rules" % app)
    labels = {}
    for kv in body.split(",") if body else []:
        if "=" not in kv:
            raise ValueError("label %r is not k=v" % kv)
        k, v = kv.split("=", 1)
        if not KEY_RE.match(k) or k.startswith("__"):
            raise ValueError("label key %r breaks the rules" % k)
        if not VALUE_RE.match(v):
            raise ValueError("label value %r breaks the rules" % v)
        if k in labels:
            raise ValueError("label %r given twice" % k)
        labels[k] = v
    return app, labels


def parse_multipart(ctype, body):
    """{field: (filename, content type, bytes)} of a multipart/form-data body."""
    m = re.match(r"^multipart/form-data;\s*boundary=(\S+)$", ctype or "")
    if not m:
        raise ValueError("Content-Type %r is not multipart/form-data with a boundary" % ctype)
    delim = b"--" + m.group(1).encode()
    if not body.startswith(delim) or not body.endswith(delim + b"--\r\n"):
        raise ValueError("the body does not start and end with the boundary")
    parts = {}
    for chunk in body[len(delim):-len(delim) - 4].split(b"\r\n" + delim):
        if not chunk.startswith(b"\r\n") or b"\r\n\r\n" not in chunk:
            raise ValueError("a part without headers")
        head, data = chunk[2:].split(b"\r\n\r\n", 1)
        headers = {}
        for line in head.decode("latin-1").split("\r\n"):
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        cd = headers.get("content-disposition", "")
        nm = re.search(r'\bname="([^"]*)"', cd)
        fn = re.search(r'\bfilename="([^"]*)"', cd)
        if not cd.startswith("form-data") or not nm:
            raise ValueError("a part's Content-Disposition is %r" % cd)
        parts[nm.group(1)] = (fn.group(1) if fn else None, headers.get("content-type"), data)
    return parts


class Request(object):
    """One accepted push: its parameters, labels, pprof (gzip'd bytes and decoded)."""

    def __init__(self, path, query, headers, app, labels, pprof_gz, prof, config):
        self.path, self.query, self.headers = path, query, headers
        self.app, self.labels = app, labels
        self.frm, self.until = int(query["from"]), int(query["until"])
        self.pprof_gz, self.prof, self.config = pprof_gz, prof, config
        self.time = time.time()

    def comments(self):
        st = self.prof["string_table"]
        out = {}
        for i in self.prof["comment"]:
            k, _, v = st[i].partition(": ")
            out[k] = v
        return out

    def sample_count(self):
        """The sum of the "samples" values (the first sample type)."""
        st = self.prof["string_table"]
        types = [st[t] for t, _ in self.prof["sample_type"]]
        i = types.index("samples")
        return sum(s["value"][i] for s in self.prof["sample"])


class Receiver(object):
    def __init__(self, base_path="", expect_headers=None):
        self.base_path = base_path
        self.expect_headers = dict(expect_headers or {})
        self.lock = threading.Lock()
        self.mode = "ok"
        self.accepted = []      # Request, in arrival order
        self.problems = []      # contract violations, as text
        self.attempts = 0       # every request that reached us, whatever the answer
        self.changed = threading.Condition(self.lock)
        self._start()

    # -- the server --

    def _start(self, port=0):
        recv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                recv._handle(self)

            def do_GET(self):
                recv._problem("method GET, expected POST")
                self._answer(405, b"")

            def _answer(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingMixIn, HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.daemon = True
        self.thread.start()

    def url(self):
        return "http://127.0.0.1:%d%s" % (self.port, self.base_path)

    def set_mode(self, mode):
        """ok, fail, hang or down (see the module's docstring)."""
        with self.lock:
            old, self.mode = self.mode, mode
            self.changed.notify_all()
        if mode == "down" and old != "down":
            self.server.shutdown()
            self.server.server_close()
        elif old == "down" and mode != "down":
            self._start(self.port)

    def close(self):
        self.set_mode("ok")
        self.server.shutdown()
        self.server.server_close()

    def _problem(self, msg):
        with self.lock:
            self.problems.append(msg)

    # -- one request --

    def _handle(self, h):
        n = int(h.headers.get("Content-Length") or -1)
        body = h.rfile.read(n) if n >= 0 else b""
        with self.lock:
            self.attempts += 1
            mode = self.mode
        if mode == "hang":
            with self.lock:
                while self.mode == "hang":
                    self.changed.wait(0.5)
            h.close_connection = True
            return
        if mode == "fail":
            h._answer(500, b"receiver told to fail")
            return
        try:
            req = self._check(h, n, body)
        except ValueError as e:
            self._problem(str(e))
            h._answer(400, str(e).encode())
            return
        with self.lock:
            self.accepted.append(req)
        h._answer(200, b"")

    def _check(self, h, n, body):
        if h.command != "POST":
            raise ValueError("method %s, expected POST" % h.command)
        url = urllib.parse.urlsplit(h.path)
        if url.path != self.base_path + "/ingest":
            raise ValueError("path %r, expected %r" % (url.path, self.base_path + "/ingest"))
        if n < 0:
            raise ValueError("no Content-Length")
        q = urllib.parse.parse_qs(url.query, keep_blank_values=True, strict_parsing=True)
        for k, v in q.items():
            if len(v) != 1:
                raise ValueError("parameter %s given %d times" % (k, len(v)))
        q = {k: v[0] for k, v in q.items()}
        for k in REQUIRED:
            if k not in q:
                raise ValueError("parameter %s missing (have %s)" % (k, sorted(q)))
        if q["format"] != "pprof":
            raise ValueError("format %r, expected pprof" % q["format"])
        if not re.match(r"^[0-9]{10}$", q["from"]) or not re.match(r"^[0-9]{10}$", q["until"]):
            raise ValueError("from/until %r/%r are not unix seconds" % (q["from"], q["until"]))
        if int(q["until"]) <= int(q["from"]):
            raise ValueError("until %s is not after from %s" % (q["until"], q["from"]))
        # A window kept through an outage arrives late: only the future and the far past are wrong.
        if int(q["until"]) > time.time() + 60 or int(q["from"]) < time.time() - 86400:
            raise ValueError("from/until %s/%s are not around now" % (q["from"], q["until"]))
        try:
            float(q["sampleRate"])
        except ValueError:
            raise ValueError("sampleRate %r is not a number" % q["sampleRate"])
        app, labels = parse_name(q["name"])
        for k, v in self.expect_headers.items():
            if h.headers.get(k) != v:
                raise ValueError("header %s is %r, expected %r" % (k, h.headers.get(k), v))
        parts = parse_multipart(h.headers.get("Content-Type"), body)
        if set(parts) != {"profile", "sample_type_config"}:
            raise ValueError("form fields %s, expected profile and sample_type_config" % sorted(parts))
        fn, _, pprof_gz = parts["profile"]
        if not fn:
            raise ValueError("the profile is not a form file")
        if pprof_gz[:2] != b"\x1f\x8b":
            raise ValueError("the profile is not gzip'd")
        try:
            prof = decode_profile(gzip.decompress(pprof_gz))
        except (OSError, ValueError, EOFError, IndexError, UnicodeDecodeError) as e:
            raise ValueError("the profile does not decode: %s" % e)
        fn, _, cfg = parts["sample_type_config"]
        try:
            config = json.loads(cfg.decode("utf-8"))
        except ValueError as e:
            raise ValueError("sample_type_config is not JSON: %s" % e)
        st = prof["string_table"]
        types = [st[t] for t, _ in prof["sample_type"]]
        for t, c in config.items():
            if t not in types:
                raise ValueError("sample_type_config names %r, not in the profile's %r" % (t, types))
            if set(c) - {"units", "aggregation", "display-name", "sampled"} or \
                    c.get("units") not in ("samples", "objects", "bytes") or \
                    c.get("aggregation") not in ("sum", "average") or \
                    not isinstance(c.get("sampled"), bool):
                raise ValueError("sample_type_config %r breaks the documented fields" % c)
        return Request(url.path, q, dict(h.headers), app, labels, pprof_gz, prof, config)

    # -- for the tests --

    def snapshot(self):
        with self.lock:
            return list(self.accepted), list(self.problems), self.attempts
