# Target for test_dump_hung.py's crash check: a segfault in C reached from
# Python through ctypes (libc's strlen of address 16, by ctypes.string_at),
# what a crash in a C extension is. The test runs it under gdb, which stops
# at the fault and dumps the core. Runs on every CPython from 2.7 on.
import ctypes


def crash():
    ctypes.string_at(16)  # @crash


crash()
