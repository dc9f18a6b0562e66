# Target for test_hostile.py: names a terminal would act on.
#
# The main thread spins in a function whose name and file name are escape
# sequences (OSC 52 writes the clipboard in some terminals), a newline that
# would forge a frame line, a C1 CSI, a bidi override and a line separator;
# the process name (comm) is an escape too, and argv carries one.
# Prints "ready {json}" once spinning; exits after LIFETIME seconds.
import ctypes
import json
import os
import sys
import threading
import time

LIFETIME = 300.0
EVIL = "\x1b]52;c;aGk=\x07\n    forged (x.py:1)\x9b31m\u202eevil\u2028\x7f"


def spin():
    n = 0
    while True:
        n += 1


code = spin.__code__
repl = {"co_name": EVIL, "co_filename": "evil\x1b[2J.py"}
if hasattr(code, "co_qualname"):
    repl["co_qualname"] = EVIL
spin.__code__ = code.replace(**repl)

try:
    ctypes.CDLL(None).prctl(15, b"\x1b[31mred\n", 0, 0, 0)  # PR_SET_NAME
except (OSError, AttributeError):
    pass

threading.Timer(LIFETIME, lambda: os._exit(0)).start()
sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
sys.stdout.flush()
spin()
