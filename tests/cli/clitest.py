"""Helpers shared by the `walrus` command's black-box tests (test_cli.py,
test_doctor.py): the binary under test, the pass/fail tally behind their
'N passed, N failed' line, and waiting out an instance's lingering
supervisor.  Each test is its own process, so the tally is module state."""
import fcntl, os, signal, sys, time

# meson passes the built binary's path; the default serves a run by hand
# from the source tree.
WALRUS = sys.argv[1] if len(sys.argv) > 1 else "build/tools/walrus"
# The build's data page size (-Dpage_size): meson test sets
# WALRUS_TEST_PAGE_SIZE; by hand, the default 8192.  The longest key
# (WALRUS_MAX_KEY) follows from it.
PAGE_SIZE = int(os.environ.get("WALRUS_TEST_PAGE_SIZE", "8192"))
MAX_KEY = {8192: 1024, 4096: 480}[PAGE_SIZE]
passed = failed = 0


def check(name, cond, detail=""):
    """Counts a check; a failed one is printed with its detail and the run
    goes on, so that one run reports every failure."""
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def summary():
    """Prints 'N passed, N failed'; returns the exit status."""
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def stop_instance(d):
    """Waits for the lingering supervisor of d to exit (kills it after 15 s)."""
    try:
        pid = int(open(os.path.join(d, "walrus.pid")).readline().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for _ in range(150):
        try:
            st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if st == "Z":
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def wait_stopped(d, timeout=60):
    """Blocks until every process of d's instance has exited: they hold the
    directory lock (an OFD lock on byte 0 of walrus.pid) until the last of
    them is gone, so a lock of ours waits for exactly that.  The lock is
    dropped at once.  False when it did not happen within timeout seconds."""
    try:
        fd = os.open(os.path.join(d, "walrus.pid"), os.O_RDWR)
    except FileNotFoundError:
        return True  # removed by a clean shutdown, or never started

    def expired(*_):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(timeout)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0, os.SEEK_SET)
        return True
    except TimeoutError:
        return False
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.close(fd)


def wait_for(cond, timeout=60.0):
    """Waits on a state, not a time: the bound only ends a broken run."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
