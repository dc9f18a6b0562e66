"""A small request-serving loop with one obvious hot spot, for trying spy on.

Each request is parsed (JSON), its user looked up, and a response rendered
(JSON again). find_user() scans a list of users from the front, so most of
the time goes to that one loop; a dict keyed by name would answer in
constant time, and that is the fix a profile should point you to. A
background thread sends a heartbeat now and then and otherwise sleeps, so it
shows only with `spy record --idle`.

    python3 examples/demo.py --seconds 30 &
    build/spy dump --pid $!
    build/spy record --pid $! -d 10 -o demo.svg
"""

import argparse
import json
import os
import random
import sys
import threading
import time

USERS = 20000


def make_users(n):
    return [{"name": "user%d" % i, "plan": ("free", "pro")[i % 2], "quota": i % 97}
            for i in range(n)]


def make_request(rng):
    items = [{"sku": rng.randrange(10 ** 6), "qty": rng.randrange(1, 5)}
             for _ in range(40)]
    return json.dumps({"user": "user%d" % rng.randrange(USERS), "items": items})


def parse_request(raw):
    return json.loads(raw)


def find_user(users, name):
    for user in users:  # the hot spot: a linear scan
        if user["name"] == name:
            return user
    return None


def price(items):
    return sum(item["qty"] * (item["sku"] % 1000) / 100.0 for item in items)


def render_response(user, req):
    total = price(req["items"])
    return json.dumps({"user": user["name"], "plan": user["plan"],
                       "lines": len(req["items"]), "total": round(total, 2)})


def handle(raw, users):
    req = parse_request(raw)
    user = find_user(users, req["user"])
    return render_response(user, req)


def heartbeat(stop):
    while not stop.wait(0.5):
        sys.stderr.write("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0,
                    help="how long to run (default: 30)")
    args = ap.parse_args()

    users = make_users(USERS)
    rng = random.Random(1)
    stop = threading.Event()
    beat = threading.Thread(target=heartbeat, args=(stop,), name="heartbeat")
    beat.start()
    print("demo: pid %d, serving requests for %g s" % (os.getpid(), args.seconds),
          file=sys.stderr, flush=True)
    deadline = time.monotonic() + args.seconds
    served = 0
    while time.monotonic() < deadline:
        handle(make_request(rng), users)
        served += 1
    stop.set()
    beat.join()
    print("demo: %d requests served" % served, file=sys.stderr)


if __name__ == "__main__":
    main()
