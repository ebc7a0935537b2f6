/*
 * archiver.c - walrus-arch: the auxiliary process that archives WAL.
 *
 * Why a process of its own: archiving runs an arbitrary shell command or
 * copies whole segments into another file system, either of which may be
 * slow or hang; nothing on the write path may wait for it.  The only link
 * back is the archive status (wal/archive.c): a segment is recycled only
 * once it is .done, so an archive that fails holds WAL back, never loses it.
 *
 * Order: history files first (a restore follows them to pick each
 * segment's timeline), then completed segments (end <= the flushed LSN) by
 * LSN, each under wal_archive_name(timeline, start) with the timeline that
 * holds it: after a promotion, the segments of the old timeline that its
 * primary did not archive go under the old timeline's number.  The first failure
 * ends the round: a later segment is never archived before an earlier one,
 * so the archive has no gap.  Retries back off from 100 ms to 5 s.
 *
 * Built-in copy (archive_dir): NAME.tmp written, fsynced, renamed to NAME,
 * the directory fsynced.  A NAME already there with the same bytes is a
 * success (the archiver died between the rename and .done); with other
 * bytes a failure, never overwritten: it belongs to another history.
 *
 * Shutdown: the other processes stop at the shutdown request; this one
 * waits until the supervisor says the checkpointer is gone (the shutdown
 * checkpoint is in the WAL), archives every completed segment, and exits;
 * failing that for ARCH_SHUTDOWN_BOUND, it says so and exits, leaving the
 * segments .ready for the next start.
 */
#include "engine/engine.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include "fdcache/fdcache.h"
#include "wal/wal.h"

#define ARCH_POLL_NS        (100ULL * 1000000) /* new segments are noticed this often */
#define ARCH_BACKOFF_MIN_NS (100ULL * 1000000)
#define ARCH_BACKOFF_MAX_NS (5000ULL * 1000000)
#define ARCH_SHUTDOWN_BOUND (60ULL * 1000000000) /* ns of retrying at shutdown */
#define ARCH_COPY_CHUNK     (1 << 20)
#define ARCH_OUTPUT_MAX     512 /* bytes of a failing command's output in the WARNING */

typedef struct arch_state {
	const wr_options *o;
	uint64_t seg;
	uint32_t tli;
	wal_history h; /* the timeline's history: each segment is archived under its own */
	char waldir[PATH_MAX];
	char statusdir[PATH_MAX];
	wr_lsn done_upto;         /* every completed segment before this is archived */
	wr_lsn first_pending;     /* after a failed round: the WAL not archived starts here */
	bool scan_needed;         /* history files, or a retry, or a start */
	bool warned_stray;        /* a file named like no WAL file was reported */
	char why[1024];           /* the last failure's cause */
	uint64_t switch_seg;      /* archive_timeout: the segment being watched ... */
	uint64_t switch_since_ns; /* ... and since when it holds WAL */
} arch_state;

/* ---------------------------------------------------------------- statistics */

static void publish_name(arch_shared *a, char *dst, const char *name)
{
	atomic_fetch_add(&a->names_seq, 1);
	wr_snprintf(dst, sizeof(a->last_archived), "%s", name);
	atomic_fetch_add(&a->names_seq, 1);
}

void archiver_stats(const arch_shared *a, char *last_archived, char *last_failed, size_t len)
{
	arch_shared *m = (arch_shared *)a; /* the sequence word is read only */
	for (int tries = 0; tries < 100; tries++) {
		uint32_t s = atomic_load(&m->names_seq);
		wr_snprintf(last_archived, len, "%.*s", (int)sizeof(a->last_archived) - 1,
		            a->last_archived);
		wr_snprintf(last_failed, len, "%.*s", (int)sizeof(a->last_failed) - 1,
		            a->last_failed);
		if (s % 2 == 0 && atomic_load(&m->names_seq) == s)
			return;
	}
}

static void note_archived(const char *name)
{
	arch_shared *a = &engine_sh()->arch;
	atomic_fetch_add(&a->archived_count, 1);
	atomic_store(&a->last_archived_us, wr_wall_us());
	publish_name(a, a->last_archived, name);
}

static void note_failed(const char *name, const char *why)
{
	arch_shared *a = &engine_sh()->arch;
	atomic_fetch_add(&a->failed_count, 1);
	atomic_store(&a->last_failed_us, wr_wall_us());
	publish_name(a, a->last_failed, name);
	wr_log(WR_WARNING, "could not archive \"%s\": %s; retrying", name, why);
}

/* ---------------------------------------------------------------- built-in copy */

/* 1: same bytes, 0: different, -1: error (why set). */
static int same_contents(arch_state *st, const char *a, const char *b, char *buf)
{
	int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
	int res = -1;
	if (fa < 0 || fb < 0) {
		wr_snprintf(st->why, sizeof(st->why), "could not open \"%s\": %s", fa < 0 ? a : b,
		            strerror(errno));
		goto out;
	}
	char *buf2 = buf + ARCH_COPY_CHUNK;
	for (;;) {
		ssize_t na = wr_read_full(fa, buf, ARCH_COPY_CHUNK);
		ssize_t nb = wr_read_full(fb, buf2, ARCH_COPY_CHUNK);
		if (na < 0 || nb < 0) {
			wr_snprintf(st->why, sizeof(st->why), "could not read \"%s\": %s",
			            na < 0 ? a : b, strerror(errno));
			goto out;
		}
		if (na != nb || memcmp(buf, buf2, (size_t)na) != 0) {
			res = 0;
			goto out;
		}
		if (na == 0) {
			res = 1;
			goto out;
		}
	}
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return res;
}

static bool fail_errno(arch_state *st, const char *what, const char *path)
{
	wr_snprintf(st->why, sizeof(st->why), "could not %s \"%s\": %s", what, path,
	            strerror(errno));
	return false;
}

/* Copies @src to @tmp and makes it durable. */
static bool copy_to_tmp(arch_state *st, const char *src, const char *tmp, char *buf)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return fail_errno(st, "open", src);
	int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		close(in);
		return fail_errno(st, "create", tmp);
	}
	bool ok = true;
	for (;;) {
		ssize_t n = wr_read_full(in, buf, ARCH_COPY_CHUNK);
		if (n < 0) {
			ok = fail_errno(st, "read", src);
			break;
		}
		if (n == 0)
			break;
		if (wr_write_full(out, buf, (size_t)n) != 0) {
			ok = fail_errno(st, "write", tmp);
			break;
		}
	}
	/* A failed fsync is not retried: the next attempt writes a new file. */
	if (ok && fsync(out) != 0)
		ok = fail_errno(st, "fsync", tmp);
	close(in);
	if (close(out) != 0 && ok)
		ok = fail_errno(st, "close", tmp);
	return ok;
}

static bool fsync_dir(arch_state *st, const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return fail_errno(st, "open", dir);
	bool ok = fsync(fd) == 0 || fail_errno(st, "fsync", dir);
	close(fd);
	return ok;
}

static bool fsync_file(arch_state *st, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail_errno(st, "open", path);
	bool ok = fsync(fd) == 0 || fail_errno(st, "fsync", path);
	close(fd);
	return ok;
}

static bool archive_copy(arch_state *st, const char *src, const char *name)
{
	const char *dir = st->o->archive_dir;
	char dest[PATH_MAX], tmp[PATH_MAX];
	if (!wr_snprintf(dest, sizeof(dest), "%s/%s", dir, name) ||
	    !wr_snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, name)) {
		wr_snprintf(st->why, sizeof(st->why), "archive_dir is too long");
		return false;
	}
	char *buf = malloc(2 * (size_t)ARCH_COPY_CHUNK);
	if (buf == NULL) {
		wr_snprintf(st->why, sizeof(st->why), "out of memory");
		return false;
	}
	bool ok;
	if (access(dest, F_OK) == 0) {
		int same = same_contents(st, src, dest, buf);
		if (same == 0)
			wr_snprintf(st->why, sizeof(st->why),
			            "\"%s\" exists with other contents (another instance's WAL?); "
			            "it is not overwritten",
			            dest);
		/* Found after a crash between the rename and the directory's
		 * fsync, or put there by someone else: durable before it counts. */
		ok = same == 1 && fsync_file(st, dest) && fsync_dir(st, dir);
	} else {
		ok = copy_to_tmp(st, src, tmp, buf);
		if (ok && rename(tmp, dest) != 0)
			ok = fail_errno(st, "rename to", dest);
		if (ok)
			ok = fsync_dir(st, dir);
		if (!ok)
			(void)unlink(tmp);
	}
	free(buf);
	return ok;
}

/* ---------------------------------------------------------------- archive_command */

/* The command with %p, %f and %% replaced; false when it does not fit. */
static bool expand_command(const char *cmd, const char *path, const char *name, char *out,
                           size_t len)
{
	size_t n = 0;
	for (const char *c = cmd; *c != '\0'; c++) {
		const char *add = NULL;
		char one[2] = {*c, '\0'};
		if (c[0] == '%' && (c[1] == 'p' || c[1] == 'f' || c[1] == '%')) {
			add = c[1] == 'p' ? path : c[1] == 'f' ? name : "%";
			c++;
		} else {
			add = one;
		}
		size_t a = strlen(add);
		if (n + a >= len)
			return false;
		memcpy(out + n, add, a);
		n += a;
	}
	out[n] = '\0';
	return true;
}

/*
 * The command runs in the data directory, where %p is "wal/NAME": nothing
 * of the directory's own path is pasted into it, and NAME is checked to be
 * a segment's or a history file's hexadecimal name (list_wal), so nothing
 * the shell would read as syntax reaches it.
 */
static _Noreturn void exec_command(const char *cmd, int out_fd, const char *datadir)
{
	setpgid(0, 0);
	if (chdir(datadir) != 0)
		_exit(126);
	int null = open("/dev/null", O_RDONLY);
	if (null >= 0 && null != 0) {
		dup2(null, 0);
		close(null);
	}
	dup2(out_fd, 1);
	dup2(out_fd, 2);
	/* Not the directory lock nor anything else of the instance's. */
	close_range(3, ~0U, 0);
	signal(SIGINT, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
	_exit(127);
}

/* Keeps the last ARCH_OUTPUT_MAX bytes of the command's output, one line. */
static void keep_output(char *out, size_t *used, const char *buf, size_t n)
{
	size_t cap = ARCH_OUTPUT_MAX - 1;
	if (n > cap) {
		buf += n - cap;
		n = cap;
	}
	if (*used + n > cap) {
		size_t drop = *used + n - cap;
		memmove(out, out + drop, *used - drop);
		*used -= drop;
	}
	for (size_t i = 0; i < n; i++) {
		char c = buf[i];
		if (c == '\n' || c == '\r')
			c = ' ';
		out[(*used)++] = c;
	}
	out[*used] = '\0';
}

static bool give_up_waiting(pid_t supervisor, uint64_t deadline_ns)
{
	return getppid() != supervisor || (deadline_ns != 0 && wr_now_ns() > deadline_ns);
}

/* Waits for @pid, collecting its output from @fd; its wait status, -1 if lost (errno). */
static int wait_command(pid_t pid, int fd, char *out, pid_t supervisor, uint64_t deadline_ns)
{
	size_t used = 0;
	bool open_fd = true;
	int status = 0;
	out[0] = '\0';
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		/* A command that hangs must not hold a clean shutdown for ever. */
		if (deadline_ns == 0 && atomic_load(&engine_sh()->arch.final))
			deadline_ns = wr_now_ns() + ARCH_SHUTDOWN_BOUND;
		if (give_up_waiting(supervisor, deadline_ns))
			kill(-pid, SIGKILL);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (open_fd && poll(&p, 1, 100) > 0) {
			char buf[256];
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n > 0)
				keep_output(out, &used, buf, (size_t)n);
			else if (n == 0)
				open_fd = false;
		} else if (!open_fd) {
			(void)poll(NULL, 0, 100);
		}
	}
	return status;
}

static bool archive_run(arch_state *st, const char *src, const char *name, pid_t supervisor,
                        uint64_t deadline_ns)
{
	char cmd[2 * WR_OPT_STR_MAX + PATH_MAX], output[ARCH_OUTPUT_MAX], rel[64];
	const char *file = strrchr(src, '/') != NULL ? strrchr(src, '/') + 1 : src;
	wr_snprintf(rel, sizeof(rel), "wal/%s", file);
	if (!expand_command(st->o->archive_command, rel, name, cmd, sizeof(cmd))) {
		wr_snprintf(st->why, sizeof(st->why), "archive_command is too long once expanded");
		return false;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return fail_errno(st, "create a pipe for", "archive_command");
	pid_t pid = fork();
	if (pid == 0)
		exec_command(cmd, p[1], engine_sh()->datadir);
	close(p[1]);
	if (pid > 0)
		(void)setpgid(pid, pid); /* as the child does: either one wins the race */
	if (pid < 0) {
		close(p[0]);
		return fail_errno(st, "fork for", "archive_command");
	}
	int status = wait_command(pid, p[0], output, supervisor, deadline_ns);
	int wait_errno = errno;
	close(p[0]);
	if (status == -1) {
		wr_snprintf(st->why, sizeof(st->why), "could not wait for archive_command: %s",
		            strerror(wait_errno));
		return false;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return true;
	char how[64];
	if (WIFSIGNALED(status))
		wr_snprintf(how, sizeof(how), "was terminated by signal %d", WTERMSIG(status));
	else
		wr_snprintf(how, sizeof(how), "exited with code %d", WEXITSTATUS(status));
	wr_snprintf(st->why, sizeof(st->why), "archive_command %s%s%s", how, output[0] ? ": " : "",
	            output);
	return false;
}

/* ---------------------------------------------------------------- status files */

static void touch_ready(arch_state *st, const char *file)
{
	char path[PATH_MAX];
	if (!wal_archive_status_path(st->waldir, file, WAL_ARCHIVE_READY, path, sizeof(path)))
		return;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	else if (errno != EEXIST)
		wr_log(WR_WARNING, "could not create \"%s\": %m", path);
}

static bool is_done(arch_state *st, const char *file)
{
	char path[PATH_MAX];
	return wal_archive_status_path(st->waldir, file, WAL_ARCHIVE_DONE, path, sizeof(path)) &&
	       access(path, F_OK) == 0;
}

/* .ready becomes .done, durably: only then may the segment be recycled. */
static void mark_done(arch_state *st, const char *file)
{
	char ready[PATH_MAX], done[PATH_MAX];
	if (!wal_archive_status_path(st->waldir, file, WAL_ARCHIVE_READY, ready, sizeof(ready)) ||
	    !wal_archive_status_path(st->waldir, file, WAL_ARCHIVE_DONE, done, sizeof(done)))
		wr_panic("archive status path of \"%s\" too long", file);
	touch_ready(st, file);
	if (fdc_rename(ready, done) != WALRUS_OK)
		wr_panic("could not mark \"%s\" archived: %s", file, walrus_errmsg());
	if (fdc_fsync_path(st->statusdir) != WALRUS_OK)
		wr_panic("could not fsync \"%s\": %s", st->statusdir, walrus_errmsg());
}

/* ---------------------------------------------------------------- rounds */

static bool archive_one(arch_state *st, const char *file, const char *name, pid_t supervisor,
                        uint64_t deadline_ns)
{
	char src[PATH_MAX];
	if (!wr_snprintf(src, sizeof(src), "%s/%s", st->waldir, file))
		wr_panic("WAL path too long");
	touch_ready(st, file);
	bool ok = st->o->archive_dir[0] != '\0'
	              ? archive_copy(st, src, name)
	              : archive_run(st, src, name, supervisor, deadline_ns);
	if (!ok) {
		note_failed(name, st->why);
		return false;
	}
	mark_done(st, file);
	note_archived(name);
	wr_log(WR_DEBUG, "archived \"%s\" as \"%s\"", file, name);
	return true;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* TTTTTTTT.history, T hexadecimal: what promotion and restore write. */
static bool history_name(const char *n)
{
	if (strlen(n) != 16 || strcmp(n + 8, ".history") != 0)
		return false;
	for (int i = 0; i < 8; i++)
		if (!isxdigit((unsigned char)n[i]))
			return false;
	return true;
}

/* A file of DIR/wal that looks like a history file but is none: ignored. */
static void stray(arch_state *st, const char *n)
{
	if (st->warned_stray)
		return;
	st->warned_stray = true;
	char shown[48];
	(void)wr_shown(shown, sizeof(shown), n, strlen(n), '?');
	wr_log(WR_WARNING,
	       "archiver: ignoring \"%s\" in the WAL directory: not a history file's name "
	       "(8 hexadecimal digits, then .history); remove it",
	       shown);
}

/* The names in DIR/wal of history files, or of completed segments, sorted. */
static int list_wal(arch_state *st, bool history, wr_lsn flushed, char ***out, size_t *n)
{
	size_t cap = 0;
	*out = NULL;
	*n = 0;
	DIR *d = opendir(st->waldir);
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", st->waldir);
	struct dirent *e;
	int rc = WALRUS_OK;
	errno = 0;
	while (rc == WALRUS_OK && (e = readdir(d)) != NULL) {
		wr_lsn start;
		size_t len = strlen(e->d_name);
		bool want = history ? history_name(e->d_name)
		                    : wal_segment_parse_name(e->d_name, st->seg, &start) &&
		                          start + st->seg <= flushed;
		if (history && !want && len > 8 && strcmp(e->d_name + len - 8, ".history") == 0)
			stray(st, e->d_name);
		if (!want)
			continue;
		char *copy = strdup(e->d_name);
		if (copy == NULL || wr_grow(out, &cap, *n + 1, sizeof(char *), 64) != WALRUS_OK) {
			free(copy);
			rc = wr_error(WALRUS_ENOMEM, "out of memory listing \"%s\"", st->waldir);
			break;
		}
		(*out)[(*n)++] = copy;
		errno = 0;
	}
	if (rc == WALRUS_OK && errno != 0)
		rc = wr_error(WALRUS_EIO, "could not read \"%s\": %m", st->waldir);
	closedir(d);
	if (*n > 0)
		qsort(*out, *n, sizeof(char *), cmp_names);
	return rc;
}

static void free_list(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Archives what is not .done in the list; false at the first failure. *left: not done. */
static bool archive_list(arch_state *st, char **v, size_t n, bool history, pid_t supervisor,
                         uint64_t deadline_ns, size_t *left)
{
	size_t i = 0;
	bool ok = true;
	for (; i < n && ok; i++) {
		char name[64];
		wr_lsn start = 0;
		if (is_done(st, v[i]))
			continue;
		if (history)
			wr_snprintf(name, sizeof(name), "%s", v[i]);
		else if (wal_segment_parse_name(v[i], st->seg, &start))
			wal_archive_name(wal_history_tli_for(&st->h, start, st->seg), start, name,
			                 sizeof(name));
		ok = archive_one(st, v[i], name, supervisor, deadline_ns);
		if (!ok)
			break;
	}
	*left = 0;
	for (; i < n; i++)
		*left += !is_done(st, v[i]);
	return ok;
}

/*
 * One pass over DIR/wal: history files, then completed segments.  True when
 * everything completed is archived.  *pending: segments still waiting.
 */
static bool archive_round(arch_state *st, pid_t supervisor, uint64_t deadline_ns, size_t *pending)
{
	wr_lsn flushed = wal_flushed_lsn();
	char **v;
	size_t n, left = 0;
	*pending = 0;
	int rc = list_wal(st, true, flushed, &v, &n);
	bool ok = rc == WALRUS_OK && archive_list(st, v, n, true, supervisor, deadline_ns, &left);
	free_list(v, n);
	if (rc == WALRUS_OK)
		rc = list_wal(st, false, flushed, &v, &n);
	if (rc != WALRUS_OK) {
		wr_log(WR_WARNING, "archiver: %s", walrus_errmsg());
		return false;
	}
	if (ok)
		ok = archive_list(st, v, n, false, supervisor, deadline_ns, &left);
	else
		left = n;
	free_list(v, n);
	*pending = left;
	wr_lsn boundary = flushed - flushed % st->seg;
	if (ok)
		st->done_upto = boundary;
	st->first_pending = ok ? 0 : boundary - WR_MIN((uint64_t)left * st->seg, boundary);
	atomic_store(&engine_sh()->arch.pending_bytes, (uint64_t)left * st->seg);
	return ok;
}

/* ---------------------------------------------------------------- archive_timeout */

static void switch_segment(void)
{
	arch_shared *a = &engine_sh()->arch;
	atomic_store(&a->switching, 1);
	if (atomic_load(&a->no_switch) == 0 && engine_running()) {
		wr_lsn end = wal_insert_switch();
		if (end != 0)
			wr_log(WR_DEBUG,
			       "archive_timeout: switched to a new WAL segment at " WAL_LSN_FMT,
			       WAL_LSN_ARGS(end));
	}
	atomic_store(&a->switching, 0);
	ipc_wake_all(&a->switching);
}

/* A segment that has held WAL for archive_timeout is ended so that it can be archived. */
static void check_timeout(arch_state *st)
{
	uint64_t timeout_ns = (uint64_t)st->o->archive_timeout_us * 1000;
	if (timeout_ns == 0)
		return;
	wr_lsn insert = wal_insert_lsn();
	uint64_t seg_start = insert - insert % st->seg;
	bool empty = insert - seg_start <= wal_page_header_size(seg_start, st->seg);
	uint64_t now = wr_now_ns();
	if (empty || seg_start != st->switch_seg) {
		st->switch_seg = seg_start;
		st->switch_since_ns = now;
		return;
	}
	if (now - st->switch_since_ns < timeout_ns)
		return;
	switch_segment();
	st->switch_since_ns = now;
}

/* ---------------------------------------------------------------- the loop */

static void arch_init(arch_state *st)
{
	engine_shared *e = engine_sh();
	wal_control c;
	memset(st, 0, sizeof(*st));
	st->o = &e->opts;
	st->seg = (uint64_t)e->opts.wal_segment_size;
	if (wal_control_read(e->datadir, &c) != WALRUS_OK)
		wr_panic("archiver: %s", walrus_errmsg());
	st->tli = wal_control_timeline(&c);
	if (!wr_snprintf(st->waldir, sizeof(st->waldir), "%s/wal", e->datadir) ||
	    !wr_snprintf(st->statusdir, sizeof(st->statusdir), "%s/%s", st->waldir,
	                 WAL_ARCHIVE_STATUS_DIR))
		wr_panic("archiver: data directory path too long");
	struct stat sb;
	if (stat(st->statusdir, &sb) != 0) {
		if (fdc_mkdir(st->statusdir, 0700) != WALRUS_OK ||
		    fdc_fsync_path(st->waldir) != WALRUS_OK)
			wr_panic("archiver: %s", walrus_errmsg());
	}
	char name[32], hist[PATH_MAX];
	wal_history_name(st->tli, name, sizeof(name));
	if (!wr_snprintf(hist, sizeof(hist), "%s/%s", st->waldir, name) ||
	    wal_history_read(hist, st->tli, &st->h) != WALRUS_OK) {
		wr_log(WR_WARNING, "archiver: %s; every segment is archived under timeline %u",
		       walrus_errmsg(), st->tli);
		memset(&st->h, 0, sizeof(st->h));
		st->h.tli = st->tli;
	}
	st->scan_needed = true;
	wr_log(WR_LOG, "archiver started: timeline %u, %s \"%s\"", st->tli,
	       e->opts.archive_dir[0] ? "archive_dir" : "archive_command",
	       e->opts.archive_dir[0] ? e->opts.archive_dir : e->opts.archive_command);
}

/* The shutdown's last pass: archive every completed segment, within the bound. */
static _Noreturn void arch_finish(arch_state *st, pid_t supervisor)
{
	engine_shared *e = engine_sh();
	uint64_t deadline = wr_now_ns() + ARCH_SHUTDOWN_BOUND;
	uint64_t backoff = ARCH_BACKOFF_MIN_NS;
	size_t pending;
	while (!archive_round(st, supervisor, deadline, &pending)) {
		if (getppid() != supervisor)
			_exit(1);
		if (wr_now_ns() + backoff > deadline) {
			wr_log(WR_WARNING,
			       "%zu WAL segments not archived; they will be archived at the next "
			       "start",
			       pending);
			_exit(0);
		}
		uint32_t seen = atomic_load(&e->aux_wakeup[WR_AUX_ARCH]);
		(void)ipc_wait_u32(&e->aux_wakeup[WR_AUX_ARCH], seen, backoff);
		backoff = WR_MIN(backoff * 2, ARCH_BACKOFF_MAX_NS);
	}
	wr_log(WR_LOG, "archiver: every completed WAL segment is archived");
	_exit(0);
}

/* The WAL held back, kept current between rounds (they may be seconds apart). */
static void publish_pending(const arch_state *st)
{
	wr_lsn flushed = wal_flushed_lsn();
	wr_lsn boundary = flushed - flushed % st->seg;
	wr_lsn from = st->first_pending != 0 ? st->first_pending : st->done_upto;
	if (from != 0 && boundary > from)
		atomic_store(&engine_sh()->arch.pending_bytes, boundary - from);
}

_Noreturn void archiver_main(pid_t supervisor)
{
	engine_shared *e = engine_sh();
	arch_state st;
	uint64_t backoff = 0, retry_at = 0;
	arch_init(&st);
	for (;;) {
		uint32_t seen = atomic_load(&e->aux_wakeup[WR_AUX_ARCH]);
		if (getppid() != supervisor)
			_exit(1);
		if (atomic_load(&e->arch.final))
			arch_finish(&st, supervisor);
		if (!atomic_load(&e->shutdown_requested))
			check_timeout(&st);
		wr_lsn flushed = wal_flushed_lsn();
		bool due = st.scan_needed ? wr_now_ns() >= retry_at
		                          : flushed - flushed % st.seg > st.done_upto;
		size_t pending;
		if (due) {
			bool ok = archive_round(&st, supervisor, 0, &pending);
			st.scan_needed = !ok;
			backoff = ok ? 0
			             : WR_MIN(WR_MAX(backoff * 2, ARCH_BACKOFF_MIN_NS),
			                      ARCH_BACKOFF_MAX_NS);
			retry_at = wr_now_ns() + backoff;
		} else {
			publish_pending(&st);
		}
		/* A wakeup (shutdown, the final pass) ends the wait early. */
		(void)ipc_wait_u32(&e->aux_wakeup[WR_AUX_ARCH], seen, ARCH_POLL_NS);
	}
}
