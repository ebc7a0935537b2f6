/*
 * aux.c - the auxiliary processes' common frame: naming, dying with the
 * supervisor, the PANIC exit, and their main loops.
 *
 * Each auxiliary process is forked by the supervisor and must not outlive
 * it: PR_SET_PDEATHSIG delivers SIGKILL when the supervisor dies, and the
 * getppid() check right after closes the race where it died before the
 * prctl.  The loops sleep on a futex word in shared memory (their latch)
 * with a timeout, so they wake on requests, on shutdown and periodically.
 */
#include "engine/engine.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fdcache/fdcache.h"

static const char *const aux_names[WR_AUX_NKINDS] = {
	[WR_AUX_CKPT] = "walrus-ckpt",
	[WR_AUX_BGWR] = "walrus-bgwr",
	[WR_AUX_WALW] = "walrus-walw",
	[WR_AUX_STARTUP] = "walrus-startup",
};

const char *aux_name(int kind)
{
	return kind >= 0 && kind < WR_AUX_NKINDS ? aux_names[kind] : "walrus-aux";
}

static void aux_panic_handler(void)
{
	shm_header *h = shm_hdr();
	if (h != NULL) {
		atomic_store(&h->panic_pid, (uint32_t)getpid());
		atomic_store(&h->state, SHM_STATE_CRASHED);
	}
	_exit(WR_PANIC_EXIT);
}

static void aux_setup(int kind, pid_t supervisor)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_IGN); /* a terminal's ^C goes to the supervisor, which decides */
	prctl(PR_SET_NAME, aux_name(kind), 0, 0, 0);
	wr_log_set_process_name(aux_name(kind));
	wr_set_panic_handler(aux_panic_handler);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		wr_log(WR_WARNING, "could not arrange to die with the supervisor: %m");
	if (getppid() != supervisor)
		_exit(1);
	/* File descriptors opened by the supervisor's fd cache are not ours to use. */
	fdc_reset();
	engine_my_proc_set(kind);
}

static bool supervisor_gone(pid_t supervisor)
{
	return getppid() != supervisor;
}

/*
 * The idle loop of the checkpointer, background writer and WAL writer until
 * their work arrives with later modules: wait on the latch, exit on shutdown.
 */
static _Noreturn void aux_idle_loop(int kind, pid_t supervisor)
{
	engine_shared *e = engine_sh();
	int64_t period_us = kind == WR_AUX_BGWR	  ? e->opts.bgwriter_delay_us
			    : kind == WR_AUX_WALW ? e->opts.wal_writer_delay_us
						  : 1000000;
	wr_log(WR_DEBUG, "%s started", aux_name(kind));
	for (;;) {
		if (atomic_load(&e->shutdown_requested))
			_exit(0);
		if (supervisor_gone(supervisor))
			_exit(1);
		uint32_t seen = atomic_load(&e->aux_wakeup[kind]);
		int rc = ipc_wait_u32(&e->aux_wakeup[kind], seen, (uint64_t)period_us * 1000);
		(void)rc; /* any wake-up just re-checks the conditions above */
	}
}

/* Recovery from the WAL arrives with the WAL module; today the data directory
 * needs no redo, and the startup process only checks it is readable. */
static _Noreturn void startup_main(void)
{
	engine_shared *e = engine_sh();
	wr_log(WR_DEBUG, "startup process: nothing to recover in \"%s\"", e->datadir);
	_exit(0);
}

_Noreturn void aux_main(int kind, int keep_fd)
{
	(void)keep_fd;
	pid_t supervisor = (pid_t)engine_sh()->supervisor_pid;
	aux_setup(kind, supervisor);
	if (kind == WR_AUX_STARTUP)
		startup_main();
	aux_idle_loop(kind, supervisor);
}
