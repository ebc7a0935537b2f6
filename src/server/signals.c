/*
 * signals.c - the server's processes wait in ppoll/epoll_pwait with the
 * signals they handle blocked everywhere else: a signal that arrives
 * between the flag check and the wait then ends the wait instead of being
 * missed.  Both backend models share the backend's flags and handlers.
 */
#include "server/srv_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

volatile sig_atomic_t srv_got_term, srv_got_int;

static void on_term(int sig)
{
	(void)sig;
	srv_got_term = 1;
}

static void on_int(int sig)
{
	(void)sig;
	srv_got_int = 1;
}

int srv_handle_signal(int sig, void (*fn)(int))
{
	struct sigaction sa = {0};
	sa.sa_handler = fn;
	if (sigemptyset(&sa.sa_mask) != 0 || sigaction(sig, &sa, NULL) != 0) {
		fprintf(stderr, "walrus serve: could not set the handler of signal %d: %s\n", sig,
		        strerror(errno));
		return -1;
	}
	return 0;
}

int srv_block_signals(const int *sigs, size_t n, sigset_t *waitmask)
{
	sigset_t block;
	sigemptyset(&block);
	for (size_t i = 0; i < n; i++)
		sigaddset(&block, sigs[i]);
	if (sigprocmask(SIG_BLOCK, &block, waitmask) != 0) {
		fprintf(stderr, "walrus serve: could not block signals: %s\n", strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		sigdelset(waitmask, sigs[i]);
	sigdelset(waitmask, SIGCHLD);
	return 0;
}

int srv_backend_signals(sigset_t *waitmask)
{
	static const int sigs[] = {SIGTERM, SIGINT};
	if (srv_handle_signal(SIGTERM, on_term) != 0 || srv_handle_signal(SIGINT, on_int) != 0 ||
	    srv_handle_signal(SIGCHLD, SIG_DFL) != 0)
		return -1;
	return srv_block_signals(sigs, sizeof(sigs) / sizeof(sigs[0]), waitmask);
}
