/*
 * error.c - error codes and the per-thread "last error" message.
 *
 * Interface: walrus_strerror() names a WALRUS_E* code; wr_error() records a
 * detailed message (read back with walrus_errmsg()) and returns its code, so
 * an error path is one statement; wr_errno_code() maps errno values onto
 * the few codes the public API promises; wr_assert_failed() is where a
 * false WR_ASSERT goes.
 *
 * Notes: the message buffer is thread-local because an embedding
 * application may call walrus from several threads (one at a time per
 * handle, but each thread reads its own last error).
 */
#include "common/common.h"

#include <errno.h>
#include <stdio.h>

#define ERRMSG_MAX 1024

static _Thread_local char errmsg[ERRMSG_MAX];

const char *walrus_strerror(int code)
{
	switch (code) {
	case WALRUS_OK:
		return "success";
	case WALRUS_ENOTFOUND:
		return "key not found";
	case WALRUS_EINVAL:
		return "invalid argument";
	case WALRUS_EIO:
		return "input/output error";
	case WALRUS_ENOSPC:
		return "no space left on device";
	case WALRUS_ECORRUPT:
		return "data corrupted";
	case WALRUS_EBUSY:
		return "resource busy";
	case WALRUS_EPERM:
		return "permission denied";
	case WALRUS_ENOENT:
		return "no such file or directory";
	case WALRUS_ERESTART:
		return "instance restarted after a crash; reopen";
	case WALRUS_EPANIC:
		return "instance panicked";
	case WALRUS_ENOMEM:
		return "out of memory";
	case WALRUS_EVERSION:
		return "incompatible version (data directory, WAL or primary)";
	case WALRUS_ETOOBIG:
		return "key or value too large";
	case WALRUS_ESHUTDOWN:
		return "instance shutting down";
	case WALRUS_EPROTO:
		return "protocol error";
	case WALRUS_ENOTWALRUS:
		return "not a walrus data directory";
	case WALRUS_EINTERNAL:
		return "internal error";
	case WALRUS_ELIMIT:
		return "configured limit reached";
	case WALRUS_EMISUSE:
		return "handle misused (two threads at once, or after fork)";
	case WALRUS_ENOTRUNNING:
		return "no instance is running";
	case WALRUS_EREADONLY:
		return "read-only: the instance is a standby";
	case WALRUS_EINTR:
		return "interrupted (walrus_interrupt)";
	case WALRUS_ECONFLICT:
		return "transaction conflict: nothing applied, retry";
	case WALRUS_ESNAPSHOT:
		return "snapshot too old";
	case WALRUS_EEXIST:
		return "already exists";
	}
	return "unknown error";
}

const char *walrus_errmsg(void)
{
	return errmsg;
}

int wr_error(int code, const char *fmt, ...)
{
	/* An error returned from a critical section would leave it half done. */
	WR_ASSERT(!wr_in_crit());
	int saved_errno = errno;
	va_list ap;

	va_start(ap, fmt);
	/* Truncation is acceptable: the start of the message names the object. */
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	errno = saved_errno;
	return code;
}

void wr_error_clear(void)
{
	errmsg[0] = '\0';
}

int wr_errno_code(int err)
{
	switch (err) {
	case ENOENT:
	case ENOTDIR:
		return WALRUS_ENOENT;
	case EACCES:
	case EPERM:
	case EROFS:
		return WALRUS_EPERM;
	case ENOSPC:
	case EDQUOT:
		return WALRUS_ENOSPC;
	case ENOMEM:
		return WALRUS_ENOMEM;
	case EINVAL:
		return WALRUS_EINVAL;
	case EBUSY:
	case EAGAIN:
#if EWOULDBLOCK != EAGAIN
	case EWOULDBLOCK:
#endif
		return WALRUS_EBUSY;
	case EMFILE:
	case ENFILE:
		return WALRUS_ELIMIT;
	}
	return WALRUS_EIO;
}

_Noreturn void wr_assert_failed(const char *cond, const char *file, int line, const char *func)
{
	wr_panic("assertion \"%s\" failed at %s:%d in %s()", cond, file, line, func);
}
