/*
 * backup_int.h - what backup.c and restore.c share: copying files into a
 * directory that must end up durable, and its markers.
 *
 * The copies use plain read(2)/write(2) in large chunks, not the fd cache:
 * they read files of the instance without taking part in its I/O (no
 * dirty-tracking, no sync requests) and write a directory that is not the
 * instance's.  Every written file and directory is fsynced by its creator
 * before the marker that says "incomplete" is removed; an fsync error is
 * returned, never retried.
 *
 * Markers: DEST/walrus.backup-incomplete while a backup is written,
 * NEWDIR/walrus.restore-incomplete while a restore copies; the engine
 * refuses to open a directory holding either (datadir.c).
 */
#ifndef WALRUS_BACKUP_INT_H
#define WALRUS_BACKUP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "repl/repl.h"
#include "wal/wal.h"
#include "walrus.h"

#define BACKUP_INCOMPLETE  "walrus.backup-incomplete"
#define RESTORE_INCOMPLETE "walrus.restore-incomplete"
#define BACKUP_CHUNK       (1u << 20)

typedef struct fc_progress {
	walrus_progress_fn fn; /* may be NULL */
	void *arg;
	uint64_t done, total;
	bool interruptible; /* walrus_interrupt() since @interrupts0 stops the copy */
	unsigned interrupts0;
} fc_progress;

/* walrus_interrupt()'s count in this process (api.c). */
unsigned fc_interrupts(void);
/* WALRUS_EINTR when walrus_interrupt() was called since @p began; OK otherwise. */
int fc_interrupted(const fc_progress *p);

/*
 * Copies @from into the new file @to (O_EXCL), fsynced and closed.  At most
 * @limit bytes are copied; when @pad > 0 the file is then filled with zeros
 * up to @pad bytes.  WALRUS_ENOENT (no message) when @from does not exist.
 * @fp_point: the failpoint checked before each chunk (NULL: none).
 */
int fc_copy_file(const char *from, const char *to, uint64_t limit, uint64_t pad, fc_progress *p,
                 const char *fp_point);
/* A new file @path holding @text, fsynced (O_EXCL unless @replace). */
int fc_write_text(const char *path, const char *text, bool replace);
/* fsync a file or directory by name. */
int fc_fsync_path(const char *path);
/* fsync the directory holding @path. */
int fc_fsync_parent(const char *path);
/* unlink, ENOENT ignored. */
int fc_unlink(const char *path);
/*
 * @dir must not exist (it is created 0700, its parent fsynced) or be an empty
 * directory; anything else is WALRUS_EINVAL naming @what.  Then @marker is
 * created in it and made durable (file, @dir, its parent).
 */
int fc_prepare_dest(const char *dir, const char *marker, const char *what);
/* fsync every file and directory under @dir, then @dir and its parent. */
int fc_sync_tree(const char *dir);
/* Copies the tree @from into @to (created), skipping names for which @skip says so. */
typedef bool (*fc_skip_fn)(const char *rel);
int fc_copy_tree(const char *from, const char *to, fc_skip_fn skip, fc_progress *p,
                 const char *fp_point);
/* Makes the directories of @rel (a relative file path) below @root. */
int fc_make_parents(const char *root, const char *rel);
/* Removes everything under @dir, then @dir itself when @remove_dir; made durable. */
int fc_remove_tree(const char *dir, bool remove_dir);
/* Bytes of the regular files under @dir (what vanishes meanwhile is not counted). */
uint64_t fc_tree_size(const char *dir);
/* Calls @fn for each regular file under @dir (its absolute path, its path below @dir);
 * entries that vanish meanwhile are skipped. */
typedef int (*fc_file_fn)(const char *abs, const char *rel, void *arg);
int fc_each_file(const char *dir, fc_file_fn fn, void *arg);
/* Test builds: the failpoint "backup:ERRNO:@point" (backup.c's kill tests). */
int fc_failpoint(const char *point, const char *path);

/*
 * What backup.c shares with the base backup a standby receives
 * (basebackup.c): the control file (@ctl with the backup's start and end)
 * and backup_label written into @dest, and the end: everything in @dest
 * fsynced, then the marker removed.
 */
int backup_write_label(const char *dest, const wal_control *ctl, wr_lsn start, wr_lsn end,
                       uint64_t start_time_us);
int backup_finish_dest(const char *dest);
/* The steps a WAL sender runs for BASE_BACKUP (aux.c gives them to repl). */
const repl_backup_ops *backup_sender_ops(void);

#endif
