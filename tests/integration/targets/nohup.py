"""A program that will not be stopped by a signal a terminal sends: it
ignores SIGHUP, SIGINT and SIGTERM (as under nohup, or with handlers of
its own) and spins."""
import signal

for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
x = 0
while True:
    x += 1
