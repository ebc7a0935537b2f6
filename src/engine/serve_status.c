/*
 * serve_status.c - DIR/walrus-serve.pid: the RESP server of `walrus serve`
 * says there whether its listeners are open, so that `walrus status` calls
 * the instance ready only once a client of the server can connect.
 *
 * The server is a client of the instance, not its supervisor, so it keeps
 * its own file: "pid\nstate\n", the state's first word "starting" or
 * "ready".  It writes "starting" before it opens the directory (before the
 * supervisor it may launch publishes "ready"), so a status probe never sees
 * the instance ready and the server not yet there.  The file counts only
 * while its server holds an OFD write lock on it: a server killed with
 * SIGKILL leaves a file that nobody holds, and the next server takes it
 * over.  A second server on the same directory finds it held and publishes
 * nothing (the first one answers for both).
 */
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool serve_path(const char *abs, char *path, size_t len)
{
	return wr_snprintf(path, len, "%s/%s", abs, WR_SERVE_FILE);
}

int serve_status_claim(const char *abs, int *fd_out)
{
	char path[PATH_MAX];
	*fd_out = -1;
	if (!serve_path(abs, path, sizeof(path)))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
	if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
		int err = errno;
		close(fd);
		if (err == EAGAIN || err == EACCES)
			return WALRUS_EBUSY; /* another server answers for the directory */
		errno = err;
		return wr_error(WALRUS_EIO, "could not lock \"%s\": %m", path);
	}
	*fd_out = fd;
	return WALRUS_OK;
}

int serve_status_set(int fd, const char *abs, const char *state)
{
	char text[1024];
	int n = snprintf(text, sizeof(text), "%d\n%s\n", (int)getpid(), state);
	if (fd < 0)
		return WALRUS_OK;
	if (n < 0 || (size_t)n >= sizeof(text))
		return wr_error(WALRUS_EINVAL, "server state too long");
	/* Cut first: a reader sees the old line, an empty file (starting) or the new one. */
	if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != (ssize_t)n)
		return wr_error(wr_errno_code(errno), "could not write \"%s/%s\": %m", abs,
		                WR_SERVE_FILE);
	return WALRUS_OK;
}

void serve_status_release(int fd, const char *abs)
{
	char path[PATH_MAX];
	if (fd < 0)
		return;
	/* Removed while still locked: a new server cannot have taken it meanwhile. */
	if (serve_path(abs, path, sizeof(path)))
		(void)unlink(path);
	close(fd);
}

bool serve_status_read(const char *abs, long *pid, char *state, size_t len)
{
	char path[PATH_MAX], text[1024];
	*pid = 0;
	state[0] = '\0';
	if (!serve_path(abs, path, sizeof(path)))
		return false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* Asking, not taking: a lock taken here would keep the next server out. */
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
	bool held = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
	ssize_t n = held ? pread(fd, text, sizeof(text) - 1, 0) : -1;
	close(fd);
	if (!held)
		return false;
	text[n > 0 ? n : 0] = '\0';
	char *nl = strchr(text, '\n');
	*pid = strtol(text, NULL, 10);
	wr_snprintf(state, len, "%.*s", nl ? (int)strcspn(nl + 1, "\n") : 0, nl ? nl + 1 : "");
	if (state[0] == '\0')
		wr_snprintf(state, len, "starting");
	return true;
}
