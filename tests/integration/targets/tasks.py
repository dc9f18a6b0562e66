# Target for test_tasks.py: asyncio tasks whose tree is known exactly.
#
# MainThread runs asyncio.run(main()), whose task is the unnamed "Task-1":
#   Task-1     main        suspended in `await chain`           awaits chain
#   chain      top -> middle -> leaf, suspended in leaf's `await never`
#   consumer   consume, suspended in Queue.get (an empty asyncio.Queue)
#   gatherer   gather_two, suspended in `await asyncio.gather(w1, w2)`
#   w1, w2     worker, suspended in `await never`           awaited by gatherer
#   cruncher   crunch -> spin: CPU work that never yields, so it is the
#              running task of the loop from "ready" on
# Thread "side-loop" runs a second event loop:
#   side-main  side, suspended in `await sleeper`            awaits sleeper
#   sleeper    nap, suspended in `await never`
# With the argument "busy" (for record --async), the cruncher and a second
# task, "hasher" (hash_loop -> digest), take turns at CPU work in slices,
# yielding to the loop in between, so both are sampled.
# Lines marked "# @name" are where each coroutine is suspended; the test
# finds them by the marker, so editing this file does not break it. Prints
# "ready" once everything is in place, and ends itself after LIFETIME seconds.
import asyncio
import sys
import threading
import time

LIFETIME = 120.0
BUSY = sys.argv[1:] == ["busy"]
side_ready = threading.Event()
workers_started = 0


async def leaf(never):
    await never  # @leaf


async def middle(never):
    await leaf(never)  # @middle


async def top(never):
    await middle(never)  # @top


async def consume(q):
    await q.get()  # @consume


async def worker(never):
    global workers_started
    workers_started += 1
    await never  # @worker


async def gather_two(never):
    w1 = asyncio.get_running_loop().create_task(worker(never), name="w1")
    w2 = asyncio.get_running_loop().create_task(worker(never), name="w2")
    await asyncio.gather(w1, w2)  # @gather_two


def spin(deadline):
    x = 0
    while time.monotonic() < deadline:
        x += 1  # @spin
    return x


async def crunch(go, deadline):
    await go
    print("ready", flush=True)
    spin(deadline)  # @crunch


def digest(deadline):
    x = 0
    while time.monotonic() < deadline:
        x ^= hash(str(x))  # @digest
    return x


async def hash_loop(go, deadline):
    # Spinning before the side loop is up could keep its thread from the
    # GIL for good on an idle machine (it never got ready): wait like crunch.
    await go
    while time.monotonic() < deadline:
        digest(time.monotonic() + 0.0037)  # @hash_loop
        await asyncio.sleep(0)


async def crunch_slices(go, deadline):
    await go
    print("ready", flush=True)
    while time.monotonic() < deadline:
        spin(time.monotonic() + 0.0029)  # @crunch_slices
        await asyncio.sleep(0)


async def nap(never):
    await never  # @nap


async def side(deadline):
    loop = asyncio.get_running_loop()
    never = loop.create_future()
    sleeper = loop.create_task(nap(never), name="sleeper")
    loop.call_later(0.01, side_ready.set)
    loop.call_later(max(0.0, deadline - time.monotonic()), never.set_result, None)
    await sleeper  # @side


def side_thread(deadline):
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(loop.create_task(side(deadline), name="side-main"))
    finally:
        loop.close()


async def main():
    deadline = time.monotonic() + LIFETIME
    loop = asyncio.get_running_loop()
    never = loop.create_future()
    go = loop.create_future()
    q = asyncio.Queue()
    chain = loop.create_task(top(never), name="chain")
    loop.create_task(consume(q), name="consumer")
    loop.create_task(gather_two(never), name="gatherer")
    if BUSY:
        loop.create_task(crunch_slices(go, deadline), name="cruncher")
        loop.create_task(hash_loop(go, deadline), name="hasher")
    else:
        loop.create_task(crunch(go, deadline), name="cruncher")
    t = threading.Thread(target=side_thread, args=(deadline,), name="side-loop")
    t.daemon = True
    t.start()
    # Not side_ready alone: on a loaded machine the side thread can set it
    # before this first looks, and go set now would let the cruncher spin
    # for good before w1 and w2 (created a loop iteration later) ever ran.
    while not side_ready.is_set() or workers_started < 2:
        await asyncio.sleep(0.01)
    # Every task has reached its await: let the cruncher run, for good.
    go.set_result(None)
    await chain  # @main


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
