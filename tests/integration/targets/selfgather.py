# Target for test_trust.py: a gather whose children list (K entries,
# argv[1], default 4096) is one task then the gather itself K - 1 times,
# awaited by the main task. A profiler following _GatheringFuture._children
# without a visited set walks K^depth nodes. Prints "ready {json}" once awaiting. Ends on its own
# after LIFETIME seconds. Runs on CPython 3.7 and later.
import asyncio
import json
import os
import sys

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))


async def sleeper():
    await asyncio.sleep(LIFETIME)


async def main(k):
    t = asyncio.ensure_future(sleeper())
    g = asyncio.gather(t)
    g._children[:] = [t] + [g] * (k - 1)
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
    sys.stdout.flush()
    # Cancelling such a gather would recurse into itself: end the process instead.
    asyncio.get_event_loop().call_later(LIFETIME, os._exit, 0)
    await g


asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096))
