"""A Pyroscope receiver on loopback, for record --push's tests and
bench/push-continuous.

It serves both ingestion APIs spy speaks and checks every request against
their contracts:
  - push.v1 (the default): POST BASE/push.v1.PusherService/Push, the Connect
    protocol's unary call with a binary body (Content-Type
    application/proto), a push.v1.PushRequest decoded by the protobuf
    library (Debian's python3-protobuf) from the schema in protos/
    (compiled by protoc at start); each RawSample's raw_profile a gzip'd
    pprof; answered 200 with an empty PushResponse, or a Connect error (a
    JSON body with code and message);
  - ingest (legacy): POST BASE/ingest with the query parameters name/from/
    until/format/sampleRate/spyName, the pprof and a sample_type_config as
    a multipart form.
Optionally over TLS (tls=TestCA(...): its server certificate; with
client_ca, a client certificate is required: mutual TLS).

Its behaviour can be switched while spy runs: "ok" answers 200, "fail"
500, "refuse" 400 with a reason phrase holding an escape character and
a Connect error, "hang" reads the request and answers nothing (the
connection is held until the mode changes), "down" refuses connections
(the listening socket is closed, as a stopped server's would be; back on
the same port with the next mode).

A request that breaks the contract is recorded in .problems and answered
400, so a test sees both the problem and spy's handling of a refusal.
Every request's raw bytes (head and body) are kept in .raw.

It needs /usr/bin/python3 (Debian's, which sees python3-protobuf), and
protoc (protobuf-compiler) for the schema: .ci/install-deps installs both.
"""

import gzip
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "unit"))
_formats = __import__("check-formats")
decode_profile = _formats.decode_profile

APP_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
VALUE_RE = re.compile(r"^[^\s{},=\"'\\\x00-\x1f\x7f]{1,255}$")
REQUIRED = ("name", "from", "until", "format", "sampleRate", "spyName")
PUSH_PATH = "/push.v1.PusherService/Push"
# What the refusing receiver says: a reason with an escape character, which spy must show escaped.
REFUSE_REASON = "Bad \x1b[31mRequest"
REFUSE_MESSAGE = "profile refused by the test"


def protobuf_problem():
    """Why push.v1 messages cannot be decoded here, or None."""
    if not shutil.which("protoc"):
        return "protoc not installed (protobuf-compiler; .ci/install-deps installs it)"
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        return "%s has no google.protobuf (python3-protobuf; .ci/install-deps installs it)" % sys.executable
    return None


def require(rep, tls=False):
    """Fail the test and end it (rep.finish) when the receiver cannot run
    here: not a skip, since .ci/install-deps installs what it needs, and
    without it nothing of push.v1 is checked. tls: openssl is needed too
    (for TestCA)."""
    why = protobuf_problem() or (None if not tls or shutil.which("openssl") else "openssl not installed")
    if why:
        rep.check("push.v1 receiver", [why + "; run this test with Debian's /usr/bin/python3"])
        rep.finish()


_classes = None


def push_classes():
    """(PushRequest, PushResponse) classes from protos/, compiled by protoc."""
    global _classes
    if _classes:
        return _classes
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    d = tempfile.mkdtemp(prefix="spy-protos-")
    try:
        out = os.path.join(d, "push.desc")
        subprocess.run(["protoc", "--descriptor_set_out=" + out, "--include_imports",
                        "-I", os.path.join(HERE, "protos"), "push/v1/push.proto"], check=True)
        with open(out, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    finally:
        shutil.rmtree(d, ignore_errors=True)
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)

    def cls(name):
        desc = pool.FindMessageTypeByName(name)
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)

    _classes = (cls("push.v1.PushRequest"), cls("push.v1.PushResponse"))
    return _classes


class TestCA(object):
    """A CA made with openssl for one test: a server certificate for
    127.0.0.1 and localhost, and a client certificate (mutual TLS)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="spy-ca-")
        self.ca, self.ca_key = self._path("ca.pem"), self._path("ca.key")
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", self.ca_key, "-out", self.ca, "-days", "2", "-subj", "/CN=spy test CA")
        self.server, self.server_key = self._leaf("server", "/CN=localhost",
                                                  "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                                  "extendedKeyUsage=serverAuth\n")
        self.client, self.client_key = self._leaf("client", "/CN=spy test client",
                                                  "extendedKeyUsage=clientAuth\n")

    def _path(self, name):
        return os.path.join(self.dir, name)

    def _openssl(self, *args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)

    def _leaf(self, name, subject, ext):
        key, csr, pem, extf = (self._path(name + s) for s in (".key", ".csr", ".pem", ".ext"))
        with open(extf, "w") as f:
            f.write(ext)
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", key, "-out", csr, "-subj", subject)
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                      "-out", pem, "-days", "2", "-extfile", extf)
        return pem, key

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


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


def decode_pprof(pprof_gz):
    if pprof_gz[:2] != b"\x1f\x8b":
        raise ValueError("the profile is not gzip'd")
    try:
        return decode_profile(gzip.decompress(pprof_gz))
    except (OSError, ValueError, EOFError, IndexError, UnicodeDecodeError) as e:
        raise ValueError("the profile does not decode: %s" % e)


class Request(object):
    """One accepted push: its labels, window, pprof (gzip'd bytes and decoded).

    api: "push" or "ingest"; app: the application (service_name); labels:
    spy's own and --label's (without __name__ and service_name); label_list:
    push's labels as sent, in order; frm/until: the window (ingest: the
    query; push: the pprof's time_nanos and duration_nanos)."""

    def __init__(self, api, headers, app, labels, frm, until, pprof_gz, prof, raw, query=None, config=None,
                 label_list=None):
        self.api, self.headers, self.app, self.labels = api, headers, app, labels
        self.frm, self.until = frm, until
        self.pprof_gz, self.prof, self.raw = pprof_gz, prof, raw
        self.query, self.config, self.label_list = query or {}, config or {}, label_list or []
        self.time = time.time()

    def comments(self):
        st = self.prof["string_table"]
        out = {}
        for i in self.prof["comment"]:
            k, _, v = st[i].partition(": ")
            out[k] = v
        return out

    def types(self, field="sample_type"):
        st = self.prof["string_table"]
        vt = self.prof[field]
        vt = vt if isinstance(vt, list) else [vt]
        return [(st[t], st[u]) for t, u in vt]

    def sample_count(self):
        """The sum of the "samples" values (the first sample type)."""
        i = [t for t, _ in self.types()].index("samples")
        return sum(s["value"][i] for s in self.prof["sample"])

    def strings(self):
        return self.prof["string_table"]


class Receiver(object):
    def __init__(self, base_path="", expect_headers=None, tls=None, client_ca=None):
        self.base_path = base_path
        self.expect_headers = dict(expect_headers or {})
        self.tls, self.client_ca = tls, client_ca
        self.lock = threading.Lock()
        self.mode = "ok"
        self.accepted = []      # Request, in arrival order
        self.problems = []      # contract violations, as text
        self.raw = []           # every request's bytes (head and body), whatever the answer
        self.attempts = 0       # every request that reached us, whatever the answer
        self.changed = threading.Condition(self.lock)
        self._start()

    # -- the server --

    def _context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.tls.server, self.tls.server_key)
        if self.client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.client_ca)
        return ctx

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

            def _answer(self, code, body, ctype=None, reason=None):
                self.send_response(code, reason)
                self.send_header("Content-Length", str(len(body)))
                if ctype:
                    self.send_header("Content-Type", ctype)
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingMixIn, HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass   # a refused handshake, a connection spy dropped: the tests look at what spy says

        self.server = Server(("127.0.0.1", port), Handler)
        if self.tls:
            # The handshake happens in the handler's thread, on its first read.
            self.server.socket = self._context().wrap_socket(self.server.socket, server_side=True,
                                                             do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.daemon = True
        self.thread.start()

    def url(self):
        return "%s://127.0.0.1:%d%s" % ("https" if self.tls else "http", self.port, self.base_path)

    def set_mode(self, mode):
        """ok, fail, refuse, hang or down (see the module's docstring)."""
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
        raw = (h.requestline + "\r\n" + str(h.headers)).encode("latin-1", "replace") + b"\r\n" + body
        with self.lock:
            self.attempts += 1
            self.raw.append(raw)
            mode = self.mode
        if mode == "down":
            # A connection kept alive from before the stop: a stopped server's would be gone, so no answer.
            h.close_connection = True
            return
        if mode == "hang":
            with self.lock:
                while self.mode == "hang":
                    self.changed.wait(0.5)
            h.close_connection = True
            return
        if mode == "fail":
            h._answer(500, b"receiver told to fail")
            return
        if mode == "refuse":
            msg = json.dumps({"code": "invalid_argument", "message": REFUSE_MESSAGE}).encode()
            h._answer(400, msg, "application/json", REFUSE_REASON)
            return
        path = urllib.parse.urlsplit(h.path).path
        try:
            if path == self.base_path + PUSH_PATH:
                req = self._check_push(h, n, body, raw)
            else:
                req = self._check_ingest(h, n, body, raw)
        except ValueError as e:
            self._problem(str(e))
            h._answer(400, str(e).encode())
            return
        with self.lock:
            self.accepted.append(req)
        if req.api == "push":
            h._answer(200, push_classes()[1]().SerializeToString(), "application/proto")
        else:
            h._answer(200, b"")

    def _check_headers(self, h):
        for k, v in self.expect_headers.items():
            if h.headers.get(k) != v:
                raise ValueError("header %s is %r, expected %r" % (k, h.headers.get(k), v))

    def _check_push(self, h, n, body, raw):
        if h.command != "POST" or n < 0:
            raise ValueError("%s without Content-Length, expected a POST with one" % h.command)
        if urllib.parse.urlsplit(h.path).query:
            raise ValueError("a query on the Connect path: %r" % h.path)
        if h.headers.get("Content-Type") != "application/proto":
            raise ValueError("Content-Type %r, expected application/proto" % h.headers.get("Content-Type"))
        if h.headers.get("Connect-Protocol-Version") not in (None, "1"):
            raise ValueError("Connect-Protocol-Version %r" % h.headers.get("Connect-Protocol-Version"))
        self._check_headers(h)
        PushRequest = push_classes()[0]
        try:
            msg = PushRequest.FromString(body)
        except Exception as e:  # the library's DecodeError
            raise ValueError("the body is not a push.v1.PushRequest: %s" % e)
        # Every byte is a known field, in field order: encoding it again gives the same bytes.
        if msg.SerializeToString() != body:
            raise ValueError("the PushRequest holds unknown fields or is not canonically encoded")
        if len(msg.series) != 1 or len(msg.series[0].samples) != 1:
            raise ValueError("%d series, expected one with one sample" % len(msg.series))
        s = msg.series[0]
        names = [lp.name for lp in s.labels]
        if names != sorted(names) or len(set(names)) != len(names):
            raise ValueError("labels %r are not sorted and unique" % names)
        labels = {lp.name: lp.value for lp in s.labels}
        if labels.get("__name__") != "process_cpu":
            raise ValueError("__name__ is %r, expected process_cpu" % labels.get("__name__"))
        app = labels.get("service_name", "")
        if not APP_RE.match(app):
            raise ValueError("service_name %r breaks the rules" % app)
        for k, v in labels.items():
            if k in ("__name__", "service_name"):
                continue
            if not KEY_RE.match(k) or k.startswith("__") or not VALUE_RE.match(v):
                raise ValueError("label %r=%r breaks the rules" % (k, v))
        sample = s.samples[0]
        if not re.match(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", sample.ID):
            raise ValueError("RawSample.ID %r is not a UUID" % sample.ID)
        prof = decode_pprof(sample.raw_profile)
        frm, dur = prof.get("time_nanos", 0), prof.get("duration_nanos", 0)
        if frm % 1000000000 or dur % 1000000000 or frm <= 0 or dur <= 0:
            raise ValueError("time_nanos %r duration_nanos %r are not whole seconds" % (frm, dur))
        frm, until = frm // 1000000000, (frm + dur) // 1000000000
        self._check_window(frm, until)
        req = Request("push", dict(h.headers), app,
                      {k: v for k, v in labels.items() if k not in ("__name__", "service_name")},
                      frm, until, sample.raw_profile, prof, raw, label_list=[(lp.name, lp.value) for lp in s.labels])
        types = req.types()
        if types != [("samples", "count"), ("cpu", "nanoseconds")] or \
                req.types("period_type") != [("cpu", "nanoseconds")]:
            raise ValueError("sample types %r, period type %r: not process_cpu's" % (types, req.types("period_type")))
        return req

    def _check_window(self, frm, until):
        if until <= frm:
            raise ValueError("until %s is not after from %s" % (until, frm))
        # A window kept through an outage arrives late: only the future and the far past are wrong.
        if until > time.time() + 60 or frm < time.time() - 86400:
            raise ValueError("from/until %s/%s are not around now" % (frm, until))

    def _check_ingest(self, h, n, body, raw):
        if h.command != "POST":
            raise ValueError("method %s, expected POST" % h.command)
        url = urllib.parse.urlsplit(h.path)
        if url.path != self.base_path + "/ingest":
            raise ValueError("path %r, expected %r or %r" % (url.path, self.base_path + "/ingest",
                                                           self.base_path + PUSH_PATH))
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
        self._check_window(int(q["from"]), int(q["until"]))
        try:
            float(q["sampleRate"])
        except ValueError:
            raise ValueError("sampleRate %r is not a number" % q["sampleRate"])
        app, labels = parse_name(q["name"])
        self._check_headers(h)
        parts = parse_multipart(h.headers.get("Content-Type"), body)
        if set(parts) != {"profile", "sample_type_config"}:
            raise ValueError("form fields %s, expected profile and sample_type_config" % sorted(parts))
        fn, _, pprof_gz = parts["profile"]
        if not fn:
            raise ValueError("the profile is not a form file")
        prof = decode_pprof(pprof_gz)
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
        return Request("ingest", dict(h.headers), app, labels, int(q["from"]), int(q["until"]), pprof_gz, prof,
                       raw, query=q, config=config)

    # -- for the tests --

    def snapshot(self):
        with self.lock:
            return list(self.accepted), list(self.problems), self.attempts
