/*
 * mapguard.c - reads through a file mapping that survive a SIGBUS.
 *
 * A load from a mapped page whose read from the device fails (or that lies
 * past the end of a file someone cut short) raises SIGBUS in the loading
 * thread, where a pread would have returned EIO.  Unhandled, it kills the
 * process, and for an embedded engine that is the application.  So while a
 * thread runs a guarded read it points a thread-local jump buffer at its
 * stack; the handler, finding the faulting address inside that read's
 * page, jumps back there and the read reports failure.  Any other SIGBUS
 * goes to whatever handler was installed before this one, or to the default
 * action, as if this handler were not there.
 *
 * Why a jump out of the handler is safe here: the code it abandons is the
 * caller's callback over the page, which takes no lock, allocates nothing
 * and writes only the caller's memory (storage.h, smgr_map_read).
 * SA_NODEFER leaves SIGBUS unblocked inside the handler, so the jump needs
 * no signal mask restored (sigsetjmp(.., 0): no system call per read); a
 * read that faulted unblocks it anyway, in case an interposer ran the
 * handler with it blocked.
 *
 * The handler is installed with the first mapping of the process and
 * removed with the last (smgr_shutdown), both under fdc_lock.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "storage/storage.h"

static struct sigaction guard_old; /* written before the handler is installed */
static bool guard_on;              /* under fdc_lock */

/* initial-exec: the handler may run in a thread that never read through a
 * mapping, and the first use of dynamic TLS in a dlopen()ed library may
 * allocate, which a signal handler must not. */
#define GUARD_TLS static _Thread_local __attribute__((tls_model("initial-exec")))
GUARD_TLS sigjmp_buf *guard_jump; /* set while this thread reads */
GUARD_TLS const char *guard_lo;
GUARD_TLS size_t guard_len;

/* As if the SIGBUS had come with our handler not installed. */
static void guard_pass_on(int sig, siginfo_t *si, void *uc)
{
	if (guard_old.sa_flags & SA_SIGINFO) {
		guard_old.sa_sigaction(sig, si, uc);
		return;
	}
	if (guard_old.sa_handler != SIG_DFL && guard_old.sa_handler != SIG_IGN) {
		guard_old.sa_handler(sig);
		return;
	}
	/* The default: restored, and the faulting load runs again and dies of
	 * it (a SIGBUS from a fault cannot be ignored). */
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	(void)sigaction(sig, &dfl, NULL);
}

static void guard_sigbus(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *j = guard_jump;
	const char *a = si->si_addr;
	if (j != NULL && a >= guard_lo && a < guard_lo + guard_len) {
		guard_jump = NULL;
		siglongjmp(*j, 1);
	}
	guard_pass_on(sig, si, uc);
}

int smgr_guard_install(void)
{
	if (guard_on)
		return WALRUS_OK;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = guard_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, NULL, &guard_old) != 0 || sigaction(SIGBUS, &sa, NULL) != 0)
		return wr_error(WALRUS_EINTERNAL, "could not install a SIGBUS handler: %m");
	guard_on = true;
	return WALRUS_OK;
}

void smgr_guard_remove(void)
{
	if (!guard_on)
		return;
	/* Only if it is still ours: the application may have put its own since. */
	struct sigaction now;
	if (sigaction(SIGBUS, NULL, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
	    now.sa_sigaction == guard_sigbus && sigaction(SIGBUS, &guard_old, NULL) != 0)
		wr_log(WR_WARNING, "could not restore the SIGBUS handler: %m");
	guard_on = false;
}

bool smgr_guard_call(const char *lo, size_t len, smgr_map_fn fn, void *arg)
{
	sigjmp_buf env;
	if (sigsetjmp(env, 0) != 0) {
		/* The handler cleared guard_jump.  SIGBUS is unblocked in case the
		 * handler ran with it blocked after all (an interposer such as
		 * ThreadSanitizer's installs its own without SA_NODEFER): the next
		 * fault would otherwise kill the process. */
		sigset_t bus;
		sigemptyset(&bus);
		sigaddset(&bus, SIGBUS);
		int rc = pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
		if (rc != 0) {
			errno = rc;
			wr_log(WR_WARNING, "could not unblock SIGBUS: %m");
		}
		return false;
	}
	guard_lo = lo;
	guard_len = len;
	atomic_signal_fence(memory_order_seq_cst); /* the range before the jump buffer */
	guard_jump = &env;
	atomic_signal_fence(memory_order_seq_cst);
	fn(lo, arg);
	atomic_signal_fence(memory_order_seq_cst);
	guard_jump = NULL;
	return true;
}
