/*
 * stats.c - the instance's counters as one JSON object (walrus_stats and
 * `walrus stats --json`): WAL, buffer pool, checkpoints, the key-value
 * layer when present, and the instance's settings with their sources.
 * Every figure is read from shared memory, so any attached process sees
 * the whole instance's.
 */
#include "engine/engine.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "kv/kv.h"
#include "repl/repl.h"
#include "wal/wal.h"

typedef struct jbuf {
	char *s;
	size_t len, cap;
	bool oom;
	bool first; /* no comma before the next member */
} jbuf;

static void jb_add(jbuf *j, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(j->s + j->len, j->cap - j->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			j->oom = true;
			return;
		}
		if ((size_t)n < j->cap - j->len) {
			j->len += (size_t)n;
			return;
		}
		size_t cap = (j->cap + (size_t)n) * 2;
		char *s = realloc(j->s, cap);
		if (s == NULL) {
			j->oom = true;
			return;
		}
		j->s = s;
		j->cap = cap;
	}
}

static void jb_open(jbuf *j, const char *name)
{
	jb_add(j, "%s\"%s\":{", j->first ? "" : ",", name);
	j->first = true;
}

static void jb_close(jbuf *j)
{
	jb_add(j, "}");
	j->first = false;
}

static void jb_u64(jbuf *j, const char *name, uint64_t v)
{
	jb_add(j, "%s\"%s\":%llu", j->first ? "" : ",", name, (unsigned long long)v);
	j->first = false;
}

static void jb_dbl(jbuf *j, const char *name, double v)
{
	jb_add(j, "%s\"%s\":%.6f", j->first ? "" : ",", name, v);
	j->first = false;
}

static void jb_lsn(jbuf *j, const char *name, wr_lsn v)
{
	jb_add(j, "%s\"%s\":\"" WAL_LSN_FMT "\"", j->first ? "" : ",", name, WAL_LSN_ARGS(v));
	j->first = false;
}

/* A JSON string member; only '"', '\\' and control characters need escaping. */
static void jb_str(jbuf *j, const char *name, const char *v)
{
	jb_add(j, "%s\"%s\":\"", j->first ? "" : ",", name);
	for (; *v != '\0'; v++) {
		if (*v == '"' || *v == '\\')
			jb_add(j, "\\%c", *v);
		else if ((unsigned char)*v < 0x20)
			jb_add(j, "\\u%04x", (unsigned)*v);
		else
			jb_add(j, "%c", *v);
	}
	jb_add(j, "\"");
	j->first = false;
}

static void stats_wal(jbuf *j)
{
	wal_stats w;
	wal_get_stats(&w);
	jb_open(j, "wal");
	jb_str(j, "io", w.direct_io ? "direct" : "buffered");
	jb_lsn(j, "insert_lsn", wal_insert_lsn());
	jb_lsn(j, "flush_lsn", wal_flushed_lsn());
	jb_lsn(j, "redo_lsn", wal_redo_lsn());
	jb_lsn(j, "sync_standby_lsn", wal_sync_standby_lsn()); /* what it confirmed */
	jb_u64(j, "sync_standby_waiters", wal_sync_standby_waiters());
	jb_u64(j, "records", w.records);
	jb_u64(j, "bytes", w.bytes);
	jb_u64(j, "fpi", w.fpis);
	jb_u64(j, "fpi_bytes_raw", w.fpi_bytes_raw);
	jb_u64(j, "fpi_bytes_stored", w.fpi_bytes_stored);
	jb_u64(j, "writes", w.writes);
	jb_u64(j, "write_bytes", w.write_bytes);
	jb_u64(j, "flushes", w.flushes);
	jb_dbl(j, "flush_s", (double)w.flush_ns / 1e9);
	jb_u64(j, "group_waits", w.group_waits);
	jb_u64(j, "gather_naps", w.gather_naps);
	jb_u64(j, "buffer_full_waits", w.buffer_full_waits);
	jb_u64(j, "segments_created", w.segments_created);
	jb_u64(j, "segments_on_demand", w.segments_on_demand);
	jb_u64(j, "prealloc_ahead", w.prealloc_ahead);
	jb_u64(j, "segments_recycled", w.segments_recycled);
	jb_u64(j, "segments_removed", w.segments_removed);
	jb_close(j);
}

static void stats_buffers(jbuf *j)
{
	buf_stats b;
	buf_get_stats(&b);
	jb_open(j, "buffers");
	jb_u64(j, "nbuffers", b.nbuffers);
	jb_u64(j, "page_size", WR_PAGE_SIZE);
	jb_str(j, "io", b.data_direct ? "direct" : "buffered");
	jb_u64(j, "hits", b.hits);
	jb_u64(j, "reads", b.reads);
	uint64_t total = b.hits + b.reads;
	jb_dbl(j, "hit_ratio", total ? (double)b.hits / (double)total : 0.0);
	jb_u64(j, "extends", b.extends);
	jb_u64(j, "written_checkpoint", b.ckpt_writes);
	jb_u64(j, "written_bgwriter", b.bgwriter_writes);
	jb_u64(j, "written_backend", b.backend_writes);
	jb_u64(j, "written_flush", b.flush_writes);
	jb_u64(j, "bgwriter_maxwritten_stops", b.bgwriter_stops);
	jb_u64(j, "allocs", b.allocs);
	jb_u64(j, "evictions", b.evictions);
	jb_u64(j, "writeback_requests", b.writebacks);
	jb_dbl(j, "content_lock_wait_s", (double)b.content_wait_ns / 1e9);
	jb_dbl(j, "io_wait_s", (double)b.io_wait_ns / 1e9);
	jb_u64(j, "io_wakeups", b.io_wakeups);
	jb_close(j);
}

static void stats_shared_memory(jbuf *j)
{
	const shm_header *h = shm_hdr();
	jb_open(j, "shared_memory");
	jb_u64(j, "bytes", h->size);
	jb_u64(j, "huge_page_size", h->huge_page_size); /* 0: normal pages */
	jb_close(j);
}

static void stats_checkpoints(jbuf *j)
{
	ckpt_shared *c = ckpt_shared_state();
	jb_open(j, "checkpoints");
	jb_u64(j, "completed", atomic_load(&c->count));
	jb_u64(j, "failed", atomic_load(&c->failed));
	jb_u64(j, "timed", atomic_load(&c->num_timed));
	jb_u64(j, "wal", atomic_load(&c->num_wal));
	jb_u64(j, "requested", atomic_load(&c->num_requested));
	ckpt_result r = c->last; /* a torn read only mixes two checkpoints' figures */
	jb_open(j, "last");
	jb_lsn(j, "lsn", r.lsn);
	jb_lsn(j, "redo_lsn", r.redo);
	jb_u64(j, "buffers_written", r.bufs_written);
	jb_dbl(j, "buffers_written_pct",
	       r.nbuffers ? 100.0 * (double)r.bufs_written / (double)r.nbuffers : 0.0);
	jb_u64(j, "wal_added", (uint64_t)r.segs_added);
	jb_u64(j, "wal_removed", (uint64_t)r.segs_removed);
	jb_u64(j, "wal_recycled", (uint64_t)r.segs_recycled);
	jb_dbl(j, "write_s", r.write_s);
	jb_dbl(j, "sync_s", r.sync_s);
	jb_dbl(j, "total_s", r.total_s);
	jb_u64(j, "sync_files", r.sync_files);
	jb_dbl(j, "sync_longest_s", r.sync_longest_s);
	jb_dbl(j, "sync_average_s", r.sync_avg_s);
	jb_u64(j, "distance_kb", r.distance / 1024);
	jb_u64(j, "estimate_kb", r.estimate / 1024);
	jb_close(j);
	jb_close(j);
}

/* Times as seconds since the epoch with a fraction, 0 for never. */
static void stats_archiver(jbuf *j, const engine_shared *e)
{
	const arch_shared *a = &e->arch;
	char last_ok[sizeof(a->last_archived)], last_bad[sizeof(a->last_failed)];
	archiver_stats(a, last_ok, last_bad, sizeof(last_ok));
	jb_open(j, "archiver");
	jb_u64(j, "archive_mode", e->opts.archive_mode);
	jb_u64(j, "archived_count", atomic_load(&a->archived_count));
	jb_str(j, "last_archived", last_ok);
	jb_dbl(j, "last_archived_time", (double)atomic_load(&a->last_archived_us) / 1e6);
	jb_u64(j, "failed_count", atomic_load(&a->failed_count));
	jb_str(j, "last_failed", last_bad);
	jb_dbl(j, "last_failed_time", (double)atomic_load(&a->last_failed_us) / 1e6);
	jb_u64(j, "archive_pending_bytes", atomic_load(&a->pending_bytes));
	jb_close(j);
}

/* Seconds since a wall-clock time in microseconds (-1: never). */
static double age_s(uint64_t us)
{
	uint64_t now = wr_wall_us();
	if (us == 0)
		return -1.0;
	return now > us ? (double)(now - us) / 1e6 : 0.0;
}

static const char *sender_state_name(uint32_t st)
{
	static const char *const names[] = {"free", "starting", "streaming", "stopping", "backup"};
	return st < WR_ARRAY_LEN(names) ? names[st] : "unknown";
}

static const char *receiver_state_name(uint32_t st)
{
	static const char *const names[] = {"stopped", "waiting for start", "connecting",
	                                    "streaming"};
	return st < WR_ARRAY_LEN(names) ? names[st] : "unknown";
}

static void stats_senders(jbuf *j, repl_state *r)
{
	wr_lsn flush = wal_flushed_lsn();
	jb_add(j, ",\"senders\":[");
	bool first = true;
	for (uint32_t i = 0; i < r->nsenders; i++) {
		repl_sender_slot *s = &r->senders[i];
		uint32_t pid = atomic_load(&s->pid);
		if (pid == 0)
			continue;
		char name[REPL_NAME_LEN], peer[REPL_NAME_LEN];
		memcpy(name, s->name, sizeof(name)); /* written before the state moves on */
		memcpy(peer, s->peer, sizeof(peer));
		name[sizeof(name) - 1] = peer[sizeof(peer) - 1] = '\0';
		wr_lsn flushed = atomic_load(&s->flushed);
		jb_add(j, "%s{", first ? "" : ",");
		first = false;
		j->first = true;
		jb_u64(j, "pid", pid);
		jb_str(j, "application_name", name);
		jb_str(j, "peer", peer);
		jb_str(j, "state", sender_state_name(atomic_load(&s->state)));
		jb_lsn(j, "sent_lsn", atomic_load(&s->sent));
		jb_lsn(j, "write_lsn", atomic_load(&s->written));
		jb_lsn(j, "flush_lsn", flushed);
		jb_lsn(j, "replay_lsn", atomic_load(&s->applied));
		jb_u64(j, "lag_bytes", flush > flushed ? flush - flushed : 0);
		jb_dbl(j, "write_lag_ms", (double)atomic_load(&s->write_lag_us) / 1000.0);
		jb_dbl(j, "flush_lag_ms", (double)atomic_load(&s->flush_lag_us) / 1000.0);
		jb_dbl(j, "replay_lag_ms", (double)atomic_load(&s->replay_lag_us) / 1000.0);
		jb_dbl(j, "reply_age_s", age_s(atomic_load(&s->reply_time_us)));
		jb_u64(j, "wakeups", atomic_load(&s->wakeups));
		jb_u64(j, "wal_messages", atomic_load(&s->wal_messages));
		jb_add(j, "}");
	}
	jb_add(j, "]");
	j->first = false;
}

static void stats_receiver(jbuf *j, repl_receiver *v)
{
	char error[sizeof(v->error)], primary[sizeof(v->primary)];
	uint32_t seq;
	int tries = 0;
	do { /* the error text is rewritten under its sequence word */
		seq = atomic_load(&v->error_seq);
		memcpy(error, v->error, sizeof(error));
	} while ((seq & 1 || seq != atomic_load(&v->error_seq)) && ++tries < 100);
	error[sizeof(error) - 1] = '\0';
	memcpy(primary, v->primary, sizeof(primary));
	primary[sizeof(primary) - 1] = '\0';
	wr_lsn flushed = atomic_load(&v->flushed), pflush = atomic_load(&v->primary_flush);
	jb_open(j, "receiver");
	jb_u64(j, "pid", atomic_load(&v->pid));
	jb_str(j, "state", receiver_state_name(atomic_load(&v->state)));
	jb_str(j, "primary", primary);
	jb_u64(j, "timeline", atomic_load(&v->timeline));
	jb_u64(j, "failed_attempts", atomic_load(&v->failed_attempts));
	jb_lsn(j, "received_lsn", atomic_load(&v->written));
	jb_lsn(j, "flushed_lsn", flushed);
	jb_lsn(j, "replayed_lsn", atomic_load(&v->applied));
	jb_lsn(j, "primary_flush_lsn", pflush);
	jb_u64(j, "lag_bytes", pflush > flushed ? pflush - flushed : 0);
	jb_dbl(j, "last_msg_age_s", age_s(atomic_load(&v->last_msg_us)));
	jb_str(j, "error", error);
	jb_close(j);
}

/* Streaming replication: the senders of a primary, the receiver of a standby. */
static void stats_replication(jbuf *j, engine_shared *e)
{
	repl_state *r = repl_shared();
	if (r == NULL)
		return;
	jb_open(j, "replication");
	jb_str(j, "role", atomic_load(&e->sb.active) ? "standby" : "primary");
	stats_senders(j, r);
	stats_receiver(j, &r->receiver);
	jb_close(j);
}

static int shape_of(uint32_t rel, void *arg)
{
	return kv_tree_shape(rel, arg);
}

/* The key spaces besides the default one: how many, what they hold, and each one's. */
static void stats_spaces(jbuf *j)
{
	kv_space_ent *sp = NULL;
	size_t n = 0;
	uint64_t keys = 0, pages = 0;
	if (kv_space_all(&sp, &n) != WALRUS_OK)
		wr_error_clear();
	kv_shape *shapes = n > 0 ? calloc(n, sizeof(*shapes)) : NULL;
	if (n > 0 && shapes == NULL) {
		j->oom = true;
		n = 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (engine_in_space(sp[i].rel, shape_of, &shapes[i]) == WALRUS_OK) {
			keys += shapes[i].keys;
			pages += shapes[i].pages;
		} else {
			wr_error_clear(); /* dropped meanwhile, or unreadable: verify says */
		}
	}
	jb_open(j, "spaces");
	jb_u64(j, "count", n);
	jb_u64(j, "keys", keys);
	jb_u64(j, "pages", pages);
	jb_add(j, ",\"list\":[");
	for (size_t i = 0; i < n; i++) {
		jb_add(j, "%s{", i == 0 ? "" : ",");
		j->first = true;
		jb_str(j, "name", sp[i].name);
		jb_u64(j, "keys", shapes[i].keys);
		jb_u64(j, "pages", shapes[i].pages);
		jb_add(j, "}");
	}
	jb_add(j, "]");
	jb_close(j);
	free(shapes);
	free(sp);
}

static void stats_kv(jbuf *j)
{
	kv_stats k;
	kv_get_stats(&k);
	jb_open(j, "kv");
	jb_u64(j, "keys", k.keys);
	jb_u64(j, "height", k.height);
	jb_u64(j, "pages", k.pages);
	jb_u64(j, "free_pages", k.free_pages);
	jb_u64(j, "gets", k.gets);
	jb_u64(j, "puts", k.puts);
	jb_u64(j, "deletes", k.deletes);
	jb_u64(j, "batches", k.batches);
	jb_u64(j, "batch_aborts", k.batch_aborts);
	jb_u64(j, "splits", k.splits);
	jb_u64(j, "pages_freed", k.pages_freed);
	jb_u64(j, "pages_reused", k.pages_reused);
	jb_u64(j, "fastpath_hits", k.fastpath_hits);
	jb_u64(j, "hint_hits", k.hint_hits);
	jb_u64(j, "prefetch_batches", k.prefetch_batches);
	jb_u64(j, "prefetch_leaves", k.prefetch_leaves);
	jb_u64(j, "shifts", k.shifts);
	jb_u64(j, "file_grows", k.file_grows);
	jb_u64(j, "size_checks", k.size_checks);
	jb_u64(j, "optimistic_reads", k.optimistic_reads);
	jb_u64(j, "optimistic_retries", k.optimistic_retries);
	jb_u64(j, "mapped_reads", k.mapped_reads);
	jb_u64(j, "mapped_retries", k.mapped_retries);
	jb_u64(j, "mapped_prefetches", k.mapped_prefetches);
	jb_u64(j, "node_copies_taken", k.node_copies_taken);
	jb_u64(j, "node_copies_rationed", k.node_copies_rationed);
	jb_u64(j, "compactions", k.compactions);
	jb_u64(j, "compact_leaves_merged", k.compact_leaves_merged);
	jb_u64(j, "compact_pages_moved", k.compact_pages_moved);
	jb_u64(j, "compact_blocks_given_back", k.compact_blocks_given_back);
	jb_u64(j, "scan_ahead", k.scan_ahead);
	jb_u64(j, "scan_ahead_io", k.scan_ahead_io);
	jb_close(j);
}

/* Snapshots and the versions held for them (kv_mvcc.c). */
static void stats_snapshots(jbuf *j)
{
	kv_mv_stats m;
	kv_mv_get_stats(&m);
	jb_open(j, "snapshots");
	jb_u64(j, "live", m.snapshots);
	jb_dbl(j, "oldest_age_s", (double)m.oldest_age_us / 1e6);
	jb_u64(j, "csn", m.csn);
	jb_u64(j, "horizon", m.horizon);
	jb_u64(j, "versions", m.versions);
	jb_u64(j, "version_bytes", m.version_bytes);
	jb_u64(j, "memory_bytes", m.ring_bytes);
	jb_u64(j, "versions_noted", m.noted);
	jb_u64(j, "versions_pruned", m.pruned);
	jb_u64(j, "versions_dropped", m.dropped);
	jb_u64(j, "taken", m.taken);
	jb_close(j);
}

/* The instance's options: each one's value and where it came from (walrus.conf, ...). */
static void stats_settings(jbuf *j, const engine_shared *e)
{
	size_t n;
	const wr_opt_desc *t = wr_opts_table(&n);
	jb_open(j, "settings");
	for (size_t i = 0; i < n; i++) {
		char v[WR_OPT_TEXT_MAX];
		if (t[i].scope != WR_SCOPE_INSTANCE ||
		    wr_opts_get(&e->opts, t[i].name, v, sizeof(v)) != WALRUS_OK)
			continue;
		jb_open(j, t[i].name);
		jb_str(j, "value", v); /* string options may hold '"' or '\\' */
		jb_str(j, "source", wr_opt_source_name(e->opt_source[i]));
		jb_close(j);
	}
	jb_close(j);
}

/* A standby's recovery (hotstandby.c); after a promotion: active 0. */
static void stats_standby(jbuf *j, engine_shared *e)
{
	standby_shared *sb = &e->sb;
	jb_open(j, "standby");
	jb_u64(j, "active", atomic_load(&sb->active));
	jb_u64(j, "consistent", atomic_load(&sb->consistent));
	jb_lsn(j, "replay_lsn", wal_replayed_lsn());
	jb_u64(j, "replay_time_ms", wal_replayed_time_ms()); /* the last record's insertion time */
	jb_lsn(j, "wal_end_lsn", atomic_load(&sb->wal_end)); /* durable here, replayable */
	jb_u64(j, "segments_restored", atomic_load(&sb->restored));
	jb_close(j);
}

static void stats_slots(jbuf *j)
{
	wal_slot_info s[WAL_MAX_RSLOTS_LISTED];
	int n = wal_slots_list(s, WAL_MAX_RSLOTS_LISTED);
	jb_add(j, "%s\"slots\":[", j->first ? "" : ",");
	for (int i = 0; i < n; i++) {
		jb_add(j, "%s{", i ? "," : "");
		j->first = true;
		jb_str(j, "name", s[i].name);
		jb_lsn(j, "restart_lsn", s[i].restart_lsn);
		jb_u64(j, "active_pid", s[i].active_pid);
		jb_u64(j, "invalidated", s[i].invalidated);
		jb_add(j, "}");
	}
	jb_add(j, "]");
	j->first = false;
}

int engine_stats_json(char **out)
{
	jbuf j = {.first = true};
	*out = NULL;
	jb_add(&j, "{");
	engine_shared *e = engine_sh();
	jb_open(&j, "instance");
	jb_u64(&j, "supervisor_pid", e->supervisor_pid);
	jb_u64(&j, "crash_restarts", e->crash_restarts);
	jb_u64(&j, "uptime_s", (wr_wall_us() - e->start_time_us) / 1000000);
	jb_u64(&j, "read_only", atomic_load(&e->read_only)); /* 1: a full disk (reserve.c) */
	jb_close(&j);
	stats_wal(&j);
	stats_buffers(&j);
	stats_shared_memory(&j);
	stats_checkpoints(&j);
	stats_archiver(&j, e);
	stats_replication(&j, e);
	stats_standby(&j, e);
	stats_slots(&j);
	stats_kv(&j);
	stats_spaces(&j);
	stats_snapshots(&j);
	stats_settings(&j, e);
	jb_add(&j, "}");
	if (j.oom) {
		free(j.s);
		return wr_error(WALRUS_ENOMEM, "out of memory building statistics");
	}
	*out = j.s;
	return WALRUS_OK;
}
