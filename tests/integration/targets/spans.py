# Target for test_spans.py: the OpenTelemetry Python SDK's spans, whose
# ids are the ground truth.
#
# A TracerProvider whose exporter writes every ended span (trace id, span
# id, name, start and end in ns, the thread's ident) as one json line to
# argv[1], flushed as it ends. Two threads loop, each:
#   in_outer    busy inside span "outer-<thread>-<i>",
#   in_inner    busy inside its child "inner-<thread>-<i>" (the current
#               span is the innermost),
#   in_nothing  busy with no span current at all.
# Prints "ready {json}" once both threads run; ends by itself after
# LIFETIME seconds (SPY_TARGET_LIFETIME overrides).
import json
import os
import sys
import threading
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
START = time.time()
OUT = open(sys.argv[1], "a")
LOCK = threading.Lock()


class FileExporter(SpanExporter):
    def export(self, spans):
        with LOCK:
            for s in spans:
                c = s.get_span_context()
                OUT.write(json.dumps({"trace_id": "%032x" % c.trace_id, "span_id": "%016x" % c.span_id,
                                      "name": s.name, "start": s.start_time, "end": s.end_time,
                                      "thread": s.attributes.get("thread")}) + "\n")
            OUT.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def busy(seconds):
    until = time.time() + seconds
    x = 0
    while time.time() < until:
        for i in range(500):
            x += i * i
    return x


def in_outer():
    return busy(0.02)


def in_inner():
    return busy(0.015)


def in_nothing():
    return busy(0.015)


def loop(tracer, tag):
    i = 0
    while time.time() - START < LIFETIME:
        with tracer.start_as_current_span("outer-%s-%d" % (tag, i), attributes={"thread": tag}):
            in_outer()
            with tracer.start_as_current_span("inner-%s-%d" % (tag, i), attributes={"thread": tag}):
                in_inner()
        in_nothing()
        i += 1


def main():
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("spy-test")
    threads = [threading.Thread(target=loop, args=(tracer, tag), name=tag, daemon=True) for tag in ("a", "b")]
    for t in threads:
        t.start()
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
    sys.stdout.flush()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
