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
 * removed with the last (smgr_shutdown), both under fdc_lock.  The handler
 * found there is passed SIGBUS as the kernel would have: its sa_mask (and
 * SIGBUS itself, without SA_NODEFER) blocked while it runs, SA_RESETHAND
 * honoured (after one delivery ours stands over the default), on the
 * alternate stack if it asked for one (ours asks then too); a signal it would have ignored is
 * ignored, one it would have died of kills the process, and nothing here installs SIG_DFL for good.
 * Once the application put a handler of its own over ours, ours is never installed again: that
 * handler may chain to ours, and ours would chain back to it for ever.  Mapped reads then stay off
 * (smgr_map_block reads without a mapping when the guard cannot be installed).
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
static bool guard_displaced;       /* another handler was put over ours: never again */

/* initial-exec: the handler may run in a thread that never read through a
 * mapping, and the first use of dynamic TLS in a dlopen()ed library may
 * allocate, which a signal handler must not. */
#define GUARD_TLS static _Thread_local __attribute__((tls_model("initial-exec")))
GUARD_TLS sigjmp_buf *guard_jump; /* set while this thread reads */
GUARD_TLS const char *guard_lo;
GUARD_TLS size_t guard_len;

static void set_default(int sig)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	(void)sigaction(sig, &dfl, NULL);
}

/* The default action of SIGBUS: death, by the signal. */
static void guard_die(int sig, const siginfo_t *si)
{
	set_default(sig);
	if (si != NULL && si->si_code > 0)
		return; /* a fault: the load runs again and dies of it */
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	(void)pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	(void)raise(sig);
}

/* As if the SIGBUS had come with our handler not installed. */
static void guard_pass_on(int sig, siginfo_t *si, void *uc)
{
	struct sigaction old = guard_old;
	bool fault = si != NULL && si->si_code > 0; /* not sent by kill() or raise() */
	if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN && !fault)
		return;
	if (!(old.sa_flags & SA_SIGINFO) &&
	    (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN)) {
		guard_die(sig, si); /* a fault cannot be ignored */
		return;
	}
	if (old.sa_flags & SA_RESETHAND) {
		/* One delivery, then the default under ours (mapped reads stay safe). */
		memset(&guard_old, 0, sizeof(guard_old));
		guard_old.sa_handler = SIG_DFL;
	}
	sigset_t mask, prev;
	mask = old.sa_mask;
	if (!(old.sa_flags & SA_NODEFER))
		sigaddset(&mask, sig);
	bool masked = pthread_sigmask(SIG_BLOCK, &mask, &prev) == 0;
	if (old.sa_flags & SA_SIGINFO)
		old.sa_sigaction(sig, si, uc);
	else
		old.sa_handler(sig);
	if (masked)
		(void)pthread_sigmask(SIG_SETMASK, &prev, NULL);
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
	if (guard_displaced) {
		errno = EBUSY;
		return WALRUS_EBUSY; /* said once, when it was found out (smgr_guard_remove) */
	}
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	if (sigaction(SIGBUS, NULL, &old) != 0)
		return wr_error(WALRUS_EINTERNAL, "could not read the SIGBUS handler: %m");
	sa.sa_sigaction = guard_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART | (old.sa_flags & SA_ONSTACK);
	sigemptyset(&sa.sa_mask);
	guard_old = old;
	if (sigaction(SIGBUS, &sa, NULL) != 0)
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
	if (sigaction(SIGBUS, NULL, &now) != 0) {
		wr_log(WR_WARNING, "could not read the SIGBUS handler: %m");
	} else if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == guard_sigbus) {
		if (sigaction(SIGBUS, &guard_old, NULL) != 0)
			wr_log(WR_WARNING, "could not restore the SIGBUS handler: %m");
	} else {
		guard_displaced = true;
		wr_log(WR_WARNING, "the application replaced walrus's SIGBUS handler: mapped reads "
		                   "(mmap_reads) stay off in this process");
	}
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
