# -*- coding: utf-8 -*-
# The Python 3 (3.5+) part of matrix.py: a coroutine chain driven by
# coro.send(None), and a function with a non-ASCII name, which spins.
# Imported by matrix.py only on 3.5+; see there for the whole stack.
# Keep every "# @name" marked statement on one line.


def 计算():
    n = 0
    while True: n += 1  # @spin


LEAF = 计算


async def acall(step):
    return step()  # @acall_step


async def coro(step):
    return await acall(step)  # @coro_await


def drive(step):
    c = coro(step)
    return c.send(None)  # @drive_send
