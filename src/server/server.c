/*
 * server.c - the server process: listening sockets (TCP, TLS, a Unix
 * socket), the accept loop, the backends (a pool, or one forked per
 * connection), signals, reaping, shutdown.
 *
 * Interface: srv_run().
 *
 * The server opens the directory itself first (walrus_open: the instance
 * starts if needed and lives at least as long as the server), then listens.
 * Its loop sleeps in ppoll() on the listening sockets with SIGTERM, SIGINT
 * and SIGCHLD open only there; it reaps every exited backend, accepts, and
 * refuses a connection beyond max_clients with Redis's error.  Once a
 * second it checks its own handle and reopens it when the instance
 * restarted (a crash restart leaves the server a dead handle like any other
 * backend).
 *
 * Pool mode (cfg->backends > 0): the pool backends are forked at start,
 * each with a socket pair; the server accepts every connection itself and
 * sends its fd (SCM_RIGHTS) to the pool backend with the fewest
 * connections.  Chosen over pool backends sharing the listening sockets
 * (EPOLLEXCLUSIVE): the server keeps the one count of clients that
 * max_clients needs, spreads connections evenly (exclusive wake-ups favour
 * whichever process waits first, which piles connections on one process),
 * and the listeners and the Unix socket file stay with the process that
 * removes them at shutdown.  A pool backend that dies (its connections
 * drop with it; the instance crash-restarts) is forked again at once, or
 * after a second when it died young (so a backend that cannot start does
 * not spin).
 *
 * A backend is forked with the listening sockets closed in it; it inherits
 * the server's attachment, which walrus_open() in the child drops (see
 * "fork() in the application" in docs/architecture.md): the server's
 * handle is never used there.
 */
#include "server/srv_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "engine/engine.h"
#include "fdcache/fdcache.h"
#include "ipc/ipc.h"
#include "testsupport/testsupport.h"

#define SRV_BACKLOG       511
#define SRV_TICK_MS       1000
#define SRV_STOP_WAIT_MS  30000         /* backends' time to finish before SIGKILL */
#define SRV_INSTANCE_WAIT 60            /* s: the final checkpoint, beyond supervisor_linger */
#define SRV_RESPAWN_NS    1000000000ull /* a pool backend that died younger waits this */

static volatile sig_atomic_t sig_term, sig_int;

static void on_signal(int sig)
{
	if (sig == SIGTERM)
		sig_term = 1;
	else if (sig == SIGINT)
		sig_int = 1;
}

typedef struct srv_state {
	srv_config *cfg;
	walrus *db;
	int tcp_fd, unix_fd, tls_fd;
	int status_fd; /* DIR/walrus-serve.pid (engine.h, serve_status_*), or -1 */
	pid_t *kids;   /* every backend, pool or per connection */
	long nkids;
	sigset_t waitmask;
	struct pool_slot {
		pid_t pid;           /* 0: not running */
		int chan;            /* our end of its socket pair; -1 */
		uint64_t born_ns;    /* when it was forked */
		uint64_t respawn_ns; /* when to fork it again (not running) */
	} pool[SRV_MAX_POOL];
} srv_state;

/* ---------------------------------------------------------------- setup */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("walrus serve: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 2;
}

static srv_shared *map_shared(void)
{
	srv_shared *sh =
	    mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return NULL;
	pthread_mutexattr_t a;
	if (pthread_mutexattr_init(&a) != 0 ||
	    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) != 0 ||
	    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) != 0) {
		munmap(sh, sizeof(*sh));
		return NULL;
	}
	for (int i = 0; i < SRV_STRIPES; i++)
		(void)pthread_mutex_init(&sh->stripe[i], &a);
	(void)pthread_mutex_init(&sh->cursor_lock, &a);
	sh->cursor_next = 1 + (wr_wall_us() & 0xffffffu) * SRV_CURSORS; /* 0 is "start" */
	pthread_mutexattr_destroy(&a);
	sh->start_us = wr_wall_us();
	return sh;
}

/* A TCP listener on cfg->bind, port @want (0: any): its fd in *@fd_out, the port in *@bound. */
static int listen_tcp(srv_state *st, int want, int *fd_out, int *bound)
{
	srv_config *cfg = st->cfg;
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV};
	struct addrinfo *ai;
	char port[16];
	snprintf(port, sizeof(port), "%d", want);
	int e = getaddrinfo(cfg->bind, port, &hints, &ai);
	if (e != 0)
		return fail("bad address \"%s\": %s (an IPv4 or IPv6 literal is expected)",
		            cfg->bind, gai_strerror(e));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	int rc = fd < 0 ? -1 : setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (rc == 0)
		rc = bind(fd, ai->ai_addr, ai->ai_addrlen);
	if (rc == 0)
		rc = listen(fd, SRV_BACKLOG);
	freeaddrinfo(ai);
	if (rc != 0) {
		int err = errno;
		if (fd >= 0)
			close(fd);
		return fail("could not listen on %s port %d: %s", cfg->bind, want, strerror(err));
	}
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
		*bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
		                                        : ((struct sockaddr_in *)&ss)->sin_port);
	*fd_out = fd;
	return 0;
}

/* `walrus status` calls the instance ready once this is written: every listener is open. */
static void publish_ready(srv_state *st)
{
	const srv_config *cfg = st->cfg;
	char text[PATH_MAX + 128] = "ready: RESP on", *p = text + strlen(text);
	size_t room = sizeof(text) - strlen(text);
	int n = 0, m = 0;
	if (st->tcp_fd >= 0)
		n = snprintf(p, room, " %s port %d%s", cfg->bind, cfg->sh->tcp_port,
		             st->tls_fd >= 0 || st->unix_fd >= 0 ? " and" : "");
	if (n >= 0 && (size_t)n < room && st->tls_fd >= 0)
		m = snprintf(p + n, room - (size_t)n, " %s TLS port %d%s", cfg->bind,
		             cfg->sh->tls_port, st->unix_fd >= 0 ? " and" : "");
	n = n >= 0 && m >= 0 ? n + m : -1;
	if (n >= 0 && (size_t)n < room && st->unix_fd >= 0)
		snprintf(p + n, room - (size_t)n, " unix socket %s", cfg->unix_path);
	if (serve_status_set(st->status_fd, cfg->dir, text) != WALRUS_OK)
		fprintf(stderr, "walrus serve: %s\n", walrus_errmsg());
}

/* Once every listener is up (not before: a server that fails next is not serving). */
static void announce(srv_state *st)
{
	const srv_config *cfg = st->cfg;
	publish_ready(st);
	if (st->tcp_fd >= 0)
		printf("walrus serve: RESP on %s port %d\n", cfg->bind, cfg->sh->tcp_port);
	if (st->tls_fd >= 0)
		printf("walrus serve: RESP over TLS on %s port %d%s\n", cfg->bind,
		       cfg->sh->tls_port,
		       cfg->tls_auth_clients == WR_TLS_VERIFY_REQUIRED   ? " (client certificates)"
		       : cfg->tls_auth_clients == WR_TLS_VERIFY_OPTIONAL ? " (optional client "
		                                                           "certificates)"
		                                                         : "");
	/* Client certificates are a credential too; a plain TCP port has none. */
	if (st->tcp_fd >= 0 ||
	    (st->tls_fd >= 0 && cfg->tls_auth_clients != WR_TLS_VERIFY_REQUIRED)) {
		if (cfg->requirepass == NULL && strcmp(cfg->bind, "127.0.0.1") != 0 &&
		    strcmp(cfg->bind, "::1") != 0)
			fprintf(
			    stderr,
			    "walrus serve: WARNING: listening on %s without a password "
			    "(requirepass): anyone who can reach it reads and writes the data\n",
			    cfg->bind);
	}
	if (st->unix_fd >= 0)
		printf("walrus serve: RESP on unix socket %s\n", cfg->unix_path);
	char model[64] = "one backend per connection";
	if (cfg->backends > 0)
		snprintf(model, sizeof(model), "%d pool backends", cfg->backends);
	printf("walrus serve: ready (pid %d, synchronous_commit=%s, max clients %ld, %s)\n",
	       (int)getpid(), cfg->sync ? "on" : "off", cfg->max_clients, model);
	fflush(stdout);
}

/* The socket's directory must be private (0700): the socket's own mode is not enough. */
static int check_unix_dir(const char *path)
{
	char dir[PATH_MAX];
	struct stat st;
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	if (stat(dir, &st) != 0)
		return fail("could not stat \"%s\": %s", dir, strerror(errno));
	if ((st.st_mode & 077) != 0 || st.st_uid != geteuid())
		return fail("the Unix socket's directory \"%s\" must be ours with mode 0700 (it is "
		            "%04o): use the default (inside the data directory) or a private "
		            "directory",
		            dir, (unsigned)(st.st_mode & 07777));
	return 0;
}

/* A socket file left by a server that died goes; a live one is an error. */
static int clear_stale_socket(const struct sockaddr_un *sa)
{
	struct stat st;
	if (lstat(sa->sun_path, &st) != 0)
		return 0;
	if (!S_ISSOCK(st.st_mode))
		return fail("\"%s\" exists and is not a socket", sa->sun_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail("socket: %s", strerror(errno));
	int rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	close(fd);
	if (rc == 0)
		return fail("another server listens on \"%s\"", sa->sun_path);
	if (unlink(sa->sun_path) != 0)
		return fail("could not remove the stale socket \"%s\": %s", sa->sun_path,
		            strerror(errno));
	return 0;
}

static int listen_unix(srv_state *st)
{
	const char *path = st->cfg->unix_path;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return fail("Unix socket path too long (at most %zu bytes): \"%s\"",
		            sizeof(sa.sun_path) - 1, path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int rc = check_unix_dir(path);
	if (rc == 0)
		rc = clear_stale_socket(&sa);
	if (rc != 0)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	mode_t old = umask(0177); /* the file is born 0600 */
	rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc == 0)
		rc = listen(fd, SRV_BACKLOG);
	if (rc != 0) {
		int err = errno;
		if (fd >= 0)
			close(fd);
		return fail("could not listen on \"%s\": %s", path, strerror(err));
	}
	st->unix_fd = fd;
	return 0;
}

static int setup_signals(srv_state *st)
{
	/* SIGCHLD only ends ppoll: reaping is in the loop. */
	static const int sigs[] = {SIGTERM, SIGINT, SIGCHLD};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (srv_handle_signal(sigs[i], on_signal) != 0)
			return -1;
	if (srv_handle_signal(SIGPIPE, SIG_IGN) != 0)
		return -1;
	return srv_block_signals(sigs, sizeof(sigs) / sizeof(sigs[0]), &st->waitmask);
}

/* ---------------------------------------------------------------- backends */

static void reap(srv_state *st)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (long i = 0; i < st->nkids; i++) {
			if (st->kids[i] == pid) {
				st->kids[i] = st->kids[--st->nkids];
				break;
			}
		}
		for (int i = 0; i < st->cfg->backends; i++) {
			struct pool_slot *ps = &st->pool[i];
			if (ps->pid != pid)
				continue;
			/* its connections died with it */
			close(ps->chan);
			ps->chan = -1;
			ps->pid = 0;
			atomic_store(&st->cfg->sh->pool_conns[i], 0);
			uint64_t now = wr_now_ns();
			ps->respawn_ns =
			    now - ps->born_ns < SRV_RESPAWN_NS ? now + SRV_RESPAWN_NS : now;
		}
		if (WIFSIGNALED(status))
			fprintf(stderr, "walrus serve: backend %d was killed by signal %d (%s)\n",
			        (int)pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
		else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
			fprintf(stderr, "walrus serve: backend %d exited with code %d\n", (int)pid,
			        WEXITSTATUS(status));
	}
	if (st->cfg->backends == 0)
		atomic_store(&st->cfg->sh->clients, (uint32_t)st->nkids);
}

/* The error in clear; a TLS client is just closed (the server runs no handshake). */
static void refuse(srv_state *st, int fd, bool tls, const char *why)
{
	static const char full[] = "-ERR max number of clients reached\r\n";
	char msg[128];
	const char *m = full;
	if (why != NULL) {
		snprintf(msg, sizeof(msg), "-ERR %s\r\n", why);
		m = msg;
	}
	if (!tls)
		(void)send(fd, m, strlen(m), MSG_NOSIGNAL | MSG_DONTWAIT);
	atomic_fetch_add(&st->cfg->sh->rejected, 1);
}

/* LeakSanitizer's check, in builds that have it: a backend ends with _exit(). */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static _Noreturn void backend_exit(int code)
{
	if (__lsan_do_recoverable_leak_check != NULL && __lsan_do_recoverable_leak_check() != 0)
		code = 23;
	_exit(code);
}

/* In a forked backend: the server's own fds go (fork does not exec: no O_CLOEXEC help). */
static void close_server_fds(srv_state *st)
{
	if (st->tcp_fd >= 0)
		close(st->tcp_fd);
	if (st->unix_fd >= 0)
		close(st->unix_fd);
	if (st->status_fd >= 0)
		close(st->status_fd); /* its lock must go with the server, not with a backend */
	if (st->tls_fd >= 0)
		close(st->tls_fd);
	for (int i = 0; i < st->cfg->backends; i++)
		if (st->pool[i].chan >= 0)
			close(st->pool[i].chan);
}

static void spawn(srv_state *st, int fd, bool tls)
{
	fflush(NULL); /* nothing buffered may be written twice */
	pid_t pid = fork();
	if (pid == 0) {
		close_server_fds(st);
		backend_exit(srv_backend(st->cfg, fd, tls));
	}
	if (pid < 0) {
		refuse(st, fd, tls, "could not fork a backend process");
		return;
	}
	st->kids[st->nkids++] = pid;
	atomic_store(&st->cfg->sh->clients, (uint32_t)st->nkids);
}

/* Forks pool backend @i with a fresh socket pair; false when it could not. */
static bool spawn_pool(srv_state *st, int i)
{
	struct pool_slot *ps = &st->pool[i];
	int sv[2];
	if (ipc_socketpair(sv) != WALRUS_OK) {
		fprintf(stderr, "walrus serve: %s\n", walrus_errmsg());
		ps->respawn_ns = wr_now_ns() + SRV_RESPAWN_NS;
		return false;
	}
	fflush(NULL); /* nothing buffered may be written twice */
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		close_server_fds(st);
		backend_exit(srv_pool_backend(st->cfg, i, sv[1]));
	}
	close(sv[1]);
	if (pid < 0) {
		fprintf(stderr, "walrus serve: could not fork pool backend %d: %s\n", i,
		        strerror(errno));
		close(sv[0]);
		ps->respawn_ns = wr_now_ns() + SRV_RESPAWN_NS;
		return false;
	}
	/* a backend that does not take its connections must not stall the accept loop */
	int fl = fcntl(sv[0], F_GETFL);
	if (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK) != 0)
		fprintf(stderr, "walrus serve: fcntl: %s\n", strerror(errno));
	ps->pid = pid;
	ps->chan = sv[0];
	ps->born_ns = wr_now_ns();
	st->kids[st->nkids++] = pid;
	return true;
}

/* Forks the pool backends that are due (at start, or after one died). */
static void spawn_pool_due(srv_state *st)
{
	uint64_t now = wr_now_ns();
	for (int i = 0; i < st->cfg->backends; i++)
		if (st->pool[i].pid == 0 && st->pool[i].respawn_ns <= now)
			(void)spawn_pool(st, i);
}

/* Gives @fd to the pool backend with the fewest connections (trying the others if it fails). */
static void hand_off(srv_state *st, int fd, uint64_t id, bool tls)
{
	srv_handoff msg = {.id = id, .tls = tls};
	srv_shared *sh = st->cfg->sh;
	bool tried[SRV_MAX_POOL] = {false};
	for (;;) {
		int best = -1;
		uint32_t least = UINT32_MAX;
		for (int i = 0; i < st->cfg->backends; i++) {
			uint32_t n = atomic_load(&sh->pool_conns[i]);
			if (st->pool[i].pid != 0 && !tried[i] && n < least) {
				best = i;
				least = n;
			}
		}
		if (best < 0) {
			refuse(st, fd, tls, "no backend process could take the connection");
			return;
		}
		tried[best] = true;
		/* counted before it is sent: the backend subtracts when it closes */
		atomic_fetch_add(&sh->pool_conns[best], 1);
		if (ipc_send(st->pool[best].chan, &msg, sizeof(msg), &fd, 1) == WALRUS_OK)
			return;
		atomic_fetch_sub(&sh->pool_conns[best], 1);
		fprintf(stderr, "walrus serve: pool backend %d: %s\n", best, walrus_errmsg());
	}
}

static void accept_all(srv_state *st, int lfd)
{
	bool pool = st->cfg->backends > 0, tls = lfd == st->tls_fd;
	for (;;) {
		/* non-blocking for the pool's event loops (the flag travels with the fd) */
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | (pool ? SOCK_NONBLOCK : 0));
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				/* EMFILE and the like: the socket stays readable, so pause
				 * rather than spin; the connection waits in the backlog. */
				fprintf(stderr, "walrus serve: accept: %s\n", strerror(errno));
				wr_sleep_us(100000);
			}
			return;
		}
		uint64_t id = atomic_fetch_add(&st->cfg->sh->connections, 1) + 1;
		if (pool ? srv_clients(st->cfg) >= (uint32_t)st->cfg->max_clients
		         : st->nkids >= st->cfg->max_clients)
			refuse(st, fd, tls, NULL);
		else if (pool)
			hand_off(st, fd, id, tls);
		else
			spawn(st, fd, tls);
		close(fd);
	}
}

/* ---------------------------------------------------------------- the instance */

static int open_db(srv_state *st)
{
	int rc = walrus_open(st->cfg->dir, st->cfg->opts, &st->db);
	if (rc != WALRUS_OK)
		fprintf(stderr, "walrus serve: could not open \"%s\": %s\n", st->cfg->dir,
		        walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(rc));
	return rc;
}

/* The server's own handle after a crash restart: close it and attach again. */
static void check_db(srv_state *st)
{
	char *json = NULL;
	int rc = st->db != NULL ? walrus_stats(st->db, &json) : WALRUS_ERESTART;
	walrus_free(json);
	if (rc != WALRUS_ERESTART && rc != WALRUS_EPANIC && rc != WALRUS_ESHUTDOWN)
		return;
	if (st->db != NULL)
		(void)walrus_close(st->db);
	st->db = NULL;
	fprintf(stderr, "walrus serve: the instance restarted; reattaching\n");
	if (open_db(st) != WALRUS_OK)
		st->db = NULL; /* tried again at the next tick */
}

/* Whether @pid has exited: gone, or a zombie nobody reaped yet (not our child). */
static bool exited(pid_t pid)
{
	char path[64], buf[256];
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return true;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
	return paren != NULL && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/*
 * Other processes attached to the instance (not this one): then it will not
 * stop with us.  A backend we just reaped may still hold its slot (the
 * supervisor clears it when it reads the detach message), so processes
 * that have exited do not count.
 */
static int others_attached(void)
{
	engine_shared *e = engine_sh();
	wr_proc *procs = engine_procs();
	int n = 0;
	for (uint32_t i = WR_AUX_NKINDS; e != NULL && i < e->nprocs; i++) {
		uint32_t pid = atomic_load(&procs[i].pid);
		n += pid != 0 && pid != (uint32_t)getpid() && !exited((pid_t)pid);
	}
	return n;
}

/* Waits for the supervisor to finish its shutdown checkpoint and exit. */
static void wait_instance(pid_t sup, int64_t linger_s)
{
	for (int64_t i = 0; i < (linger_s + SRV_INSTANCE_WAIT) * 50; i++) {
		if (exited(sup)) {
			printf("walrus serve: the instance has shut down\n");
			return;
		}
		wr_sleep_us(20000);
	}
	fprintf(stderr, "walrus serve: the instance (supervisor pid %d) is still running\n",
	        (int)sup);
}

/* ---------------------------------------------------------------- the loop and shutdown */

/*
 * `walrus stop` (walrus_stop) of the instance this server serves: the
 * server shuts down as on SIGTERM (on SIGINT for a fast or immediate
 * stop), instead of reattaching, which would start a new instance at once
 * and leave the directory unfenced.
 */
static void operator_stop(srv_state *st)
{
	uint32_t mode = st->db != NULL ? srv_stop_requested() : 0;
	if (mode == 0)
		return;
	fprintf(stderr, "walrus serve: the instance is being stopped (%s): shutting down\n",
	        mode == WALRUS_STOP_SMART  ? "smart"
	        : mode == WALRUS_STOP_FAST ? "fast"
	                                   : "immediate");
	if (mode == WALRUS_STOP_SMART)
		sig_term = 1;
	else
		sig_int = 1;
}

static void loop(srv_state *st)
{
	uint64_t checked = wr_now_ns();
	while (!sig_term && !sig_int) {
		struct pollfd p[3];
		nfds_t n = 0;
		if (st->tcp_fd >= 0)
			p[n++] = (struct pollfd){.fd = st->tcp_fd, .events = POLLIN};
		if (st->unix_fd >= 0)
			p[n++] = (struct pollfd){.fd = st->unix_fd, .events = POLLIN};
		if (st->tls_fd >= 0)
			p[n++] = (struct pollfd){.fd = st->tls_fd, .events = POLLIN};
		struct timespec tick = {.tv_sec = SRV_TICK_MS / 1000};
		int r = ppoll(p, n, &tick, &st->waitmask);
		int err = errno;
		reap(st);
		if (sig_term || sig_int)
			break;
		spawn_pool_due(st);
		if (r < 0 && err != EINTR) {
			fprintf(stderr, "walrus serve: ppoll: %s\n", strerror(err));
			wr_sleep_us(100000);
		}
		for (nfds_t i = 0; r > 0 && i < n; i++)
			if (p[i].revents & POLLIN)
				accept_all(st, p[i].fd);
		if (wr_now_ns() - checked >= SRV_TICK_MS * 1000000ull) {
			operator_stop(st);
			if (sig_term || sig_int)
				break;
			check_db(st);
			checked = wr_now_ns();
		}
	}
}

static void close_listeners(srv_state *st)
{
	if (st->tcp_fd >= 0)
		close(st->tcp_fd);
	if (st->unix_fd >= 0) {
		close(st->unix_fd);
		(void)unlink(st->cfg->unix_path);
	}
	if (st->tls_fd >= 0)
		close(st->tls_fd);
	st->tcp_fd = st->unix_fd = st->tls_fd = -1;
}

static void signal_backends(srv_state *st, int sig)
{
	for (long i = 0; i < st->nkids; i++)
		(void)kill(st->kids[i], sig);
}

/* SIGTERM (or SIGINT: fast) to every backend, and waits for them all. */
static void stop_backends(srv_state *st)
{
	int sig = sig_int ? SIGINT : SIGTERM;
	signal_backends(st, sig);
	uint64_t deadline = wr_now_ns() + SRV_STOP_WAIT_MS * 1000000ull;
	while (st->nkids > 0) {
		struct timespec nap = {.tv_nsec = 100000000L};
		(void)ppoll(NULL, 0, &nap, &st->waitmask);
		reap(st);
		if (sig_int && sig == SIGTERM) { /* a second, impatient signal */
			sig = SIGINT;
			signal_backends(st, sig);
		}
		if (st->nkids > 0 && wr_now_ns() > deadline) {
			fprintf(stderr,
			        "walrus serve: %ld backends did not stop within %d s: killing them "
			        "(the instance will recover)\n",
			        st->nkids, SRV_STOP_WAIT_MS / 1000);
			signal_backends(st, SIGKILL);
			deadline = UINT64_MAX;
		}
	}
}

static void shut_down(srv_state *st)
{
	printf("walrus serve: %s shutdown\n", sig_int ? "fast" : "clean");
	fflush(stdout);
	(void)serve_status_set(st->status_fd, st->cfg->dir, "stopping");
	close_listeners(st);
	stop_backends(st);
	if (st->db == NULL)
		return;
	pid_t sup = walrus_supervisor_pid(st->db);
	int others = others_attached();
	int64_t linger_s = engine_sh()->opts.supervisor_linger_us / 1000000;
	(void)walrus_close(st->db);
	st->db = NULL;
	if (others == 0 && sup > 0)
		wait_instance(sup, linger_s);
	else
		printf("walrus serve: %d other processes are attached: the instance stays up\n",
		       others);
}

static void read_settings(srv_config *cfg)
{
	char v[32];
	cfg->sync = walrus_opts_get(cfg->opts, "synchronous_commit", v, sizeof(v)) == WALRUS_OK &&
	            strcmp(v, "on") == 0;
	cfg->auth_timeout_ms = cfg->opts->o.authentication_timeout_us / 1000;
	cfg->query_limit = (size_t)cfg->opts->o.client_query_buffer_limit;
	cfg->databases = (int)cfg->opts->o.databases;
	/* The running instance's limit (it may predate our options); we hold one slot. */
	cfg->max_clients = (long)engine_sh()->opts.max_connections - 1;
	/*
	 * -1: two per online CPU.  A pool backend spends much of an iteration
	 * waiting for its WAL flush, not on a CPU: with two per CPU one runs
	 * requests while the other waits, and the next flush covers several
	 * backends' writes (measured: docs/performance.md, "RESP server").
	 * Never more than could attach.
	 */
	if (cfg->backends < 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->backends = cpus > 0 ? (int)WR_MIN(2 * cpus, SRV_MAX_POOL) : 4;
	}
	cfg->backends = (int)WR_MIN(WR_MIN(cfg->backends, SRV_MAX_POOL), cfg->max_clients);
}

/* Test builds: failpoint "step:STOP:serve listen" holds the server after its
 * open, before its listeners, where a status probe must not call it ready. */
static void test_step(const char *step)
{
	FDC_LOCKED();
	(void)ts_fp_check("step", step, NULL);
}

int srv_run(srv_config *cfg)
{
	srv_state st = {.cfg = cfg, .tcp_fd = -1, .unix_fd = -1, .tls_fd = -1, .status_fd = -1};
	for (int i = 0; i < SRV_MAX_POOL; i++)
		st.pool[i].chan = -1;
	cfg->sh = map_shared();
	if (cfg->sh == NULL)
		return fail("could not map shared memory: %s", strerror(errno));
	if (setup_signals(&st) != 0)
		return 2;
	/* "starting" before the instance (which this open may launch) says "ready". */
	int src = serve_status_claim(cfg->dir, &st.status_fd);
	if (src == WALRUS_OK)
		src = serve_status_set(st.status_fd, cfg->dir, "starting");
	if (src != WALRUS_OK && src != WALRUS_EBUSY)
		fprintf(stderr, "walrus serve: %s (walrus status will not see this server)\n",
		        walrus_errmsg());
	if (open_db(&st) != WALRUS_OK) {
		serve_status_release(st.status_fd, cfg->dir);
		return 3;
	}
	read_settings(cfg);
	st.kids = calloc((size_t)WR_MAX(cfg->max_clients, 1), sizeof(*st.kids));
	int rc = st.kids == NULL ? fail("out of memory") : 0;
	if (rc == 0)
		rc = srv_tls_setup(cfg);
	test_step("serve listen");
	if (rc == 0 && cfg->tcp)
		rc = listen_tcp(&st, cfg->port, &st.tcp_fd, &cfg->sh->tcp_port);
	if (rc == 0 && cfg->tls_port >= 0)
		rc = listen_tcp(&st, cfg->tls_port, &st.tls_fd, &cfg->sh->tls_port);
	if (rc == 0 && cfg->unix_path[0] != '\0')
		rc = listen_unix(&st);
	if (rc == 0) {
		spawn_pool_due(&st);
		announce(&st);
		loop(&st);
		shut_down(&st);
	} else {
		close_listeners(&st);
		(void)walrus_close(st.db);
	}
	serve_status_release(st.status_fd, cfg->dir);
	free(st.kids);
	wr_tls_ctx_free(cfg->tls_ctx);
	cfg->tls_ctx = NULL;
	munmap(cfg->sh, sizeof(*cfg->sh));
	cfg->sh = NULL;
	return rc;
}
