/*
 * bench_report.c - the results of a `walrus bench` key-value run: the human
 * summary, the one-line JSON object, the per-second CSV and the SVG plot.
 *
 * Interface routines (tool.h): bench_print_summary, bench_print_json,
 * bench_write_csv, bench_write_svg.  Inputs: the run's settings and the
 * workload's exact figures (bench_kv_run, from the workload library) and
 * what the monitor collected (bench_series: rows, checkpoints, counters).
 *
 * The plot is SVG written directly (no dependency): throughput, p99 latency
 * and dirty buffers per second, one panel each, over a common time axis,
 * with every checkpoint's write phase and sync phase shaded across the
 * panels, from the checkpoint's own figures (start, write_s, sync_s).
 */
#include "tool.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB 1048576.0

/* ---------------------------------------------------------------- shared helpers */

/* Writes @s as a JSON string (quotes included). */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* Puts done by the run (what its WAL is for): 0 for the read workloads. */
static uint64_t run_puts(const bench_kv_run *r)
{
	if (strcmp(r->workload, "readwhilewriting") == 0)
		return r->writer_ops;
	if (strcmp(r->workload, "readrandom") == 0 || strcmp(r->workload, "scan") == 0)
		return 0;
	return r->ops;
}

static double ckpt_write_mbps(const bench_ckpt *c)
{
	return c->write_s > 0 ? (double)c->buffers * (double)WR_PAGE_SIZE / MB / c->write_s : 0.0;
}

static const char *phases_name(uint32_t p)
{
	static const char *const names[8] = {
	    "-",      "write",        "sync",        "write+sync",
	    "finish", "write+finish", "sync+finish", "write+sync+finish"};
	return names[p & 7u];
}

/* ---------------------------------------------------------------- summary */

void bench_print_summary(FILE *f, const bench_kv_run *r, const bench_series *s)
{
	double ops_s = r->seconds > 0 ? (double)r->ops / r->seconds : 0;
	bool keys = strcmp(r->workload, "scan") == 0;
	uint64_t puts = run_puts(r);

	bool threads = r->mode != NULL && strcmp(r->mode, "threads") == 0;
	/* txn_transfer's operations are commits of two accounts' balances */
	bool txn = strcmp(r->workload, "txn_transfer") == 0;

	if (txn)
		fprintf(f, "%s: %d client %s%s, %llu accounts (%llu-byte keys), %s%s\n",
		        r->workload, r->clients, threads ? "thread" : "process",
		        r->clients == 1 ? "" : (threads ? "s" : "es"), (unsigned long long)r->num,
		        (unsigned long long)r->key_size,
		        r->sync ? "durable commits" : "asynchronous commits",
		        r->seed ? ", seeded" : "");
	else
		fprintf(f, "%s: %d client %s%s%s, %llu keys of %llu+%llu bytes, %s%s\n",
		        r->workload, r->clients, threads ? "thread" : "process",
		        r->clients == 1 ? "" : (threads ? "s" : "es"),
		        r->writer_ops || strcmp(r->workload, "readwhilewriting") == 0
		            ? " + 1 writer"
		            : "",
		        (unsigned long long)r->num, (unsigned long long)r->key_size,
		        (unsigned long long)r->value_size,
		        puts || strcmp(r->workload, "readwhilewriting") == 0
		            ? (r->sync ? "durable puts" : "asynchronous puts")
		            : "reads",
		        r->seed ? ", seeded" : "");
	fprintf(f, "  %llu %s in %.2f s: %.0f %s\n", (unsigned long long)r->ops,
	        keys ? "keys" : (txn ? "commits" : "ops"), r->seconds, ops_s,
	        keys ? "keys/s" : (txn ? "commits/s" : "ops/s"));
	if (r->has_lat)
		fprintf(f,
		        "  latency us: avg %.1f  stddev %.1f  p50 %.1f  p99 %.1f  p99.9 %.1f  max "
		        "%.0f\n",
		        r->avg_us, r->stddev_us, r->p50_us, r->p99_us, r->p999_us, r->max_us);
	if (strcmp(r->workload, "readwhilewriting") == 0)
		fprintf(
		    f,
		    "  writer: %llu puts, %.0f puts/s, latency us p50 %.1f  p99 %.1f  max %.0f\n",
		    (unsigned long long)r->writer_ops,
		    r->seconds > 0 ? (double)r->writer_ops / r->seconds : 0.0, r->writer_p50_us,
		    r->writer_p99_us, r->writer_max_us);
	fprintf(f, "  checkpoints during the run: %d%s%s\n", s->nckpts,
	        s->ckpt_running ? " ended, 1 still running at the end" : "",
	        s->ckpts_failed ? " (and failures: see the log)" : "");
	for (int i = 0; i < s->nckpts; i++) {
		const bench_ckpt *c = &s->ckpts[i];
		fprintf(
		    f,
		    "    %s at %.1f s: %u buffers (%.1f%%), write %.3f s (%.1f MB/s), sync %.3f s "
		    "(%u files, longest %.3f s), total %.3f s\n",
		    c->reason, c->start_s, c->buffers,
		    c->nbuffers ? 100.0 * c->buffers / c->nbuffers : 0.0, c->write_s,
		    ckpt_write_mbps(c), c->sync_s, c->files, c->longest_sync_s, c->total_s);
	}
	if (s->ckpt_running)
		fprintf(f, "    running since %.1f s, in its %s phase\n",
		        s->ckpts[s->nckpts].start_s, s->ckpts[s->nckpts].reason);
	if (r->has_lat && s->in_ckpt_s > 0)
		fprintf(
		    f,
		    "  seconds with a checkpoint running: %.0f, %.0f ops/s, p99 %.1f us; without: "
		    "%.0f, %.0f ops/s, p99 %.1f us (from per-second histograms)\n",
		    s->in_ckpt_s, s->in_ckpt_s > 0 ? (double)s->in_ckpt_ops / s->in_ckpt_s : 0.0,
		    s->in_ckpt_p99_us, s->out_ckpt_s,
		    s->out_ckpt_s > 0 ? (double)s->out_ckpt_ops / s->out_ckpt_s : 0.0,
		    s->out_ckpt_p99_us);
	const bench_counters *d = &s->delta;
	fprintf(f, "  WAL: %.1f MB in %llu records", (double)d->wal_bytes / MB,
	        (unsigned long long)d->wal_records);
	if (puts)
		fprintf(f, ", %.0f bytes per %s", (double)d->wal_bytes / (double)puts,
		        txn ? "commit" : "put");
	fprintf(f, "; %llu full-page images (%.1f MB stored of %.1f MB)",
	        (unsigned long long)d->wal_fpis, (double)d->wal_fpi_stored / MB,
	        (double)d->wal_fpi_raw / MB);
	fprintf(f, "; segments created %llu (%llu by a writer of WAL, not preallocated)\n",
	        (unsigned long long)d->wal_segs_created, (unsigned long long)d->wal_segs_on_demand);
	fprintf(f,
	        "  buffers: written by checkpoints %llu, bgwriter %llu, backends %llu; evictions "
	        "%llu; dirty at most %u of %u\n",
	        (unsigned long long)d->ckpt_writes, (unsigned long long)d->bgwriter_writes,
	        (unsigned long long)d->backend_writes, (unsigned long long)d->evictions,
	        s->dirty_max, s->nbuffers);
	fprintf(
	    f,
	    "  working set: %llu tree pages (%.0f MB) for shared_buffers of %u pages (%.0f MB)\n",
	    (unsigned long long)s->kv_pages, (double)s->kv_pages * (double)WR_PAGE_SIZE / MB,
	    s->nbuffers, (double)s->nbuffers * (double)WR_PAGE_SIZE / MB);
	fflush(f);
}

/* ---------------------------------------------------------------- JSON */

static void json_lat(FILE *f, const char *name, bool has, double v)
{
	if (has)
		fprintf(f, ",\"%s\":%.3f", name, v);
	else
		fprintf(f, ",\"%s\":null", name);
}

void bench_print_json(FILE *f, const bench_kv_run *r, const bench_series *s)
{
	double secs = r->seconds;
	uint64_t puts = run_puts(r);
	const bench_counters *d = &s->delta;

	fprintf(f, "{\"workload\":");
	json_str(f, r->workload);
	fprintf(f, ",\"engine\":\"walrus\",\"mode\":");
	json_str(f, r->mode ? r->mode : "processes");
	fprintf(f,
	        ",\"procs\":%d,\"clients\":%d,\"num\":%llu,\"key_size\":%llu,\"value_size\":%llu,"
	        "\"sync\":%s,\"batch\":%llu,\"seed\":%llu,",
	        r->clients, r->clients, (unsigned long long)r->num, (unsigned long long)r->key_size,
	        (unsigned long long)r->value_size, r->sync ? "true" : "false",
	        (unsigned long long)(r->batch ? r->batch : 1), (unsigned long long)r->seed);
	if (r->duration_s > 0)
		fprintf(f, "\"duration_s\":%.3f,", r->duration_s);
	else
		fprintf(f, "\"duration_s\":null,");
	fprintf(f, "\"ops\":%llu,\"seconds\":%.6f,\"ops_per_s\":%.1f,\"mb_per_s\":%.3f",
	        (unsigned long long)r->ops, secs, secs > 0 ? (double)r->ops / secs : 0.0,
	        secs > 0 ? (double)r->ops * (double)(r->key_size + r->value_size) / MB / secs
	                 : 0.0);
	json_lat(f, "avg_us", r->has_lat, r->avg_us);
	json_lat(f, "stddev_us", r->has_lat, r->stddev_us);
	json_lat(f, "p50_us", r->has_lat, r->p50_us);
	json_lat(f, "p99_us", r->has_lat, r->p99_us);
	json_lat(f, "p999_us", r->has_lat, r->p999_us);
	json_lat(f, "max_us", r->has_lat, r->max_us);
	if (strcmp(r->workload, "readwhilewriting") == 0)
		fprintf(f,
		        ",\"writer_ops\":%llu,\"writer_ops_per_s\":%.1f,\"writer_p50_us\":%.3f,"
		        "\"writer_p99_us\":%.3f,\"writer_max_us\":%.3f",
		        (unsigned long long)r->writer_ops,
		        secs > 0 ? (double)r->writer_ops / secs : 0.0, r->writer_p50_us,
		        r->writer_p99_us, r->writer_max_us);
	fprintf(f, ",\"checkpoints\":[");
	for (int i = 0; i < s->nckpts; i++) {
		const bench_ckpt *c = &s->ckpts[i];
		fprintf(f, "%s{\"reason\":", i ? "," : "");
		json_str(f, c->reason);
		fprintf(f,
		        ",\"start_s\":%.3f,\"buffers\":%u,\"buffers_pct\":%.2f,\"write_s\":%.3f,"
		        "\"sync_s\":%.3f,\"total_s\":%.3f,\"write_MBps\":%.2f,\"files_synced\":%u,"
		        "\"longest_sync_s\":%.3f,\"distance_kb\":%llu}",
		        c->start_s, c->buffers,
		        c->nbuffers ? 100.0 * c->buffers / c->nbuffers : 0.0, c->write_s, c->sync_s,
		        c->total_s, ckpt_write_mbps(c), c->files, c->longest_sync_s,
		        (unsigned long long)c->distance_kb);
	}
	fprintf(f, "],\"checkpoint_running_at_end\":%s,\"checkpoints_failed\":%llu",
	        s->ckpt_running ? "true" : "false", (unsigned long long)s->ckpts_failed);
	fprintf(f, ",\"in_checkpoint_s\":%.1f,\"no_checkpoint_s\":%.1f", s->in_ckpt_s,
	        s->out_ckpt_s);
	fprintf(f, ",\"in_checkpoint_ops_per_s\":%.1f,\"no_checkpoint_ops_per_s\":%.1f",
	        s->in_ckpt_s > 0 ? (double)s->in_ckpt_ops / s->in_ckpt_s : 0.0,
	        s->out_ckpt_s > 0 ? (double)s->out_ckpt_ops / s->out_ckpt_s : 0.0);
	json_lat(f, "in_checkpoint_p99_us", r->has_lat && s->in_ckpt_s > 0, s->in_ckpt_p99_us);
	json_lat(f, "no_checkpoint_p99_us", r->has_lat && s->out_ckpt_s > 0, s->out_ckpt_p99_us);
	fprintf(f,
	        ",\"wal_bytes\":%llu,\"wal_records\":%llu,\"wal_fpi\":%llu,"
	        "\"wal_fpi_bytes_raw\":%llu,\"wal_fpi_bytes_stored\":%llu,\"wal_flushes\":%llu",
	        (unsigned long long)d->wal_bytes, (unsigned long long)d->wal_records,
	        (unsigned long long)d->wal_fpis, (unsigned long long)d->wal_fpi_raw,
	        (unsigned long long)d->wal_fpi_stored, (unsigned long long)d->wal_flushes);
	fprintf(f, ",\"wal_segments_created\":%llu,\"wal_segments_on_demand\":%llu",
	        (unsigned long long)d->wal_segs_created, (unsigned long long)d->wal_segs_on_demand);
	json_lat(f, "wal_bytes_per_put", puts > 0, puts ? (double)d->wal_bytes / (double)puts : 0);
	fprintf(f,
	        ",\"buffers_written_checkpoint\":%llu,\"buffers_written_bgwriter\":%llu,"
	        "\"buffers_written_backend\":%llu,\"evictions\":%llu,\"hits\":%llu,\"reads\":%llu,"
	        "\"nbuffers\":%u,\"page_size\":%d,\"dirty_max\":%u,\"working_set_pages\":%llu,"
	        "\"rows\":%d,",
	        (unsigned long long)d->ckpt_writes, (unsigned long long)d->bgwriter_writes,
	        (unsigned long long)d->backend_writes, (unsigned long long)d->evictions,
	        (unsigned long long)d->hits, (unsigned long long)d->reads, s->nbuffers,
	        WR_PAGE_SIZE, s->dirty_max, (unsigned long long)s->kv_pages, s->nrows);
	fprintf(f, "\"datadir\":");
	json_str(f, r->datadir);
	fprintf(f, ",\"options\":%s}\n", s->options[0] ? s->options : "{}");
	fflush(f);
}

/* ---------------------------------------------------------------- CSV */

int bench_write_csv(const char *path, const bench_kv_run *r, const bench_series *s)
{
	FILE *f = fopen(path, "w");
	if (f == NULL) {
		fprintf(stderr, "walrus bench: could not create \"%s\": %s\n", path,
		        strerror(errno));
		return TOOL_EXIT_ENGINE;
	}
	(void)r;
	fprintf(f, "t_s,secs,ops,ops_per_s,lat_avg_us,lat_stddev_us,lat_p50_us,lat_p99_us,"
	           "lat_max_us,writer_ops_per_s,checkpoint,dirty_buffers,dirty_pct,"
	           "wal_since_redo_MB,wal_MBps\n");
	for (int i = 0; i < s->nrows; i++) {
		const bench_row *w = &s->rows[i];
		double secs = w->secs > 0 ? w->secs : 1;
		fprintf(f,
		        "%.3f,%.3f,%llu,%.1f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%s,%u,%.2f,%.2f,%.2f\n",
		        w->t_s, w->secs, (unsigned long long)w->ops, (double)w->ops / secs,
		        w->avg_us, w->stddev_us, w->p50_us, w->p99_us, w->max_us,
		        (double)w->writer_ops / secs, phases_name(w->phases), w->dirty,
		        s->nbuffers ? 100.0 * w->dirty / s->nbuffers : 0.0, w->wal_since_redo_mb,
		        (double)w->wal_bytes / MB / secs);
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "walrus bench: could not write \"%s\": %s\n", path,
		        strerror(errno));
		return TOOL_EXIT_ENGINE;
	}
	return 0;
}

/* ---------------------------------------------------------------- SVG */

#define SVG_W      1000
#define SVG_LEFT   90
#define SVG_RIGHT  30
#define SVG_TOP    70
#define SVG_PANEL  170
#define SVG_GAP    45
#define SVG_BOTTOM 50

typedef struct svg_panel {
	double top;    /* y of its top edge */
	double lo, hi; /* value range */
	bool log;      /* log10 scale */
} svg_panel;

typedef struct svg_ctx {
	FILE *f;
	double t_max; /* seconds on the x axis */
} svg_ctx;

static double svg_x(const svg_ctx *c, double t)
{
	return SVG_LEFT + (SVG_W - SVG_LEFT - SVG_RIGHT) * (c->t_max > 0 ? t / c->t_max : 0);
}

static double svg_y(const svg_panel *p, double v)
{
	double a = p->lo, b = p->hi;
	if (p->log) {
		v = log10(WR_MAX(v, p->lo));
		a = log10(p->lo);
		b = log10(p->hi);
	}
	double f = b > a ? (v - a) / (b - a) : 0;
	f = WR_MIN(WR_MAX(f, 0.0), 1.0);
	return p->top + SVG_PANEL * (1 - f);
}

/* A "nice" tick step for about five ticks over @range. */
static double nice_step(double range)
{
	double raw = range > 0 ? range / 5 : 1, mag = pow(10, floor(log10(raw)));
	double n = raw / mag;
	return (n < 1.5 ? 1 : n < 3.5 ? 2 : n < 7.5 ? 5 : 10) * mag;
}

static void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *s)
{
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor,
	        size);
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '&')
			fputs("&amp;", f);
		else if ((unsigned char)*s >= 0x20)
			fputc(*s, f);
	}
	fputs("</text>\n", f);
}

static void svg_format(char *buf, size_t len, double v)
{
	if (fabs(v) >= 1e6)
		snprintf(buf, len, "%.3gM", v / 1e6);
	else if (fabs(v) >= 1e4)
		snprintf(buf, len, "%.3gk", v / 1e3);
	else
		snprintf(buf, len, "%.4g", v);
}

/* Frame, grid, y ticks and title of a panel. */
static void svg_axes(const svg_ctx *c, const svg_panel *p, const char *title)
{
	FILE *f = c->f;
	char buf[64];
	double x0 = SVG_LEFT, x1 = SVG_W - SVG_RIGHT;
	svg_text(f, x0, p->top - 8, "start", 13, title);
	if (p->log) {
		for (double v = pow(10, floor(log10(p->lo))); v <= p->hi * 1.0001; v *= 10) {
			if (v < p->lo * 0.9999)
				continue;
			double y = svg_y(p, v);
			fprintf(f,
			        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			        "stroke=\"#ddd\"/>\n",
			        x0, y, x1, y);
			svg_format(buf, sizeof(buf), v);
			svg_text(f, x0 - 6, y + 4, "end", 11, buf);
		}
	} else {
		double step = nice_step(p->hi - p->lo);
		for (double v = ceil(p->lo / step) * step; v <= p->hi * 1.0001; v += step) {
			double y = svg_y(p, v);
			fprintf(f,
			        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			        "stroke=\"#ddd\"/>\n",
			        x0, y, x1, y);
			svg_format(buf, sizeof(buf), v);
			svg_text(f, x0 - 6, y + 4, "end", 11, buf);
		}
	}
	fprintf(f,
	        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"none\" "
	        "stroke=\"#444\"/>\n",
	        x0, p->top, x1 - x0, SVG_PANEL);
}

/* A value per row as a polyline (NaN: no point). */
static void svg_line(const svg_ctx *c, const svg_panel *p, const bench_series *s,
                     double (*val)(const bench_row *), const char *color)
{
	FILE *f = c->f;
	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
	for (int i = 0; i < s->nrows; i++) {
		const bench_row *w = &s->rows[i];
		double v = val(w);
		if (isnan(v))
			continue;
		fprintf(f, "%.1f,%.1f ", svg_x(c, w->t_s - w->secs / 2), svg_y(p, v));
	}
	fprintf(f, "\"/>\n");
}

static double row_ops(const bench_row *w)
{
	return w->secs > 0 ? (double)w->ops / w->secs : 0.0;
}

static double row_writer_ops(const bench_row *w)
{
	return w->secs > 0 ? (double)w->writer_ops / w->secs : 0.0;
}

static double row_p99(const bench_row *w)
{
	return w->ops ? w->p99_us : NAN;
}

static uint32_t g_svg_nbuffers; /* for row_dirty */

static double row_dirty(const bench_row *w)
{
	return g_svg_nbuffers ? 100.0 * w->dirty / g_svg_nbuffers : 0.0;
}

/* Shades [from, to) seconds across every panel. */
static void svg_shade(const svg_ctx *c, const svg_panel *panels, int n, double from, double to,
                      const char *color)
{
	from = WR_MAX(from, 0.0);
	to = WR_MIN(to, c->t_max);
	if (to <= from)
		return;
	double x0 = svg_x(c, from), w = WR_MAX(svg_x(c, to) - x0, 1.0);
	for (int i = 0; i < n; i++)
		fprintf(c->f,
		        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\" "
		        "fill-opacity=\"0.55\"/>\n",
		        x0, panels[i].top, w, SVG_PANEL, color);
}

#define SVG_WRITE "#fdd49e"
#define SVG_SYNC  "#ef6548"

int bench_write_svg(const char *path, const bench_kv_run *r, const bench_series *s)
{
	FILE *f = fopen(path, "w");
	if (f == NULL) {
		fprintf(stderr, "walrus bench: could not create \"%s\": %s\n", path,
		        strerror(errno));
		return TOOL_EXIT_ENGINE;
	}
	svg_ctx c = {.f = f, .t_max = s->nrows ? s->rows[s->nrows - 1].t_s : 1};
	bool rww = strcmp(r->workload, "readwhilewriting") == 0;
	double ops_max = 1, lat_lo = 1e12, lat_hi = 0;
	for (int i = 0; i < s->nrows; i++) {
		const bench_row *w = &s->rows[i];
		ops_max = WR_MAX(ops_max, row_ops(w));
		ops_max = WR_MAX(ops_max, row_writer_ops(w));
		if (w->ops) {
			lat_lo = WR_MIN(lat_lo, w->p99_us);
			lat_hi = WR_MAX(lat_hi, w->p99_us);
		}
	}
	if (lat_hi <= 0) {
		lat_lo = 1;
		lat_hi = 10;
	}
	lat_lo = WR_MAX(lat_lo, 0.01);
	svg_panel p[3] = {
	    {.top = SVG_TOP, .lo = 0, .hi = ops_max * 1.08},
	    {.top = SVG_TOP + SVG_PANEL + SVG_GAP, .lo = lat_lo, .hi = lat_hi},
	    {.top = SVG_TOP + 2.0 * (SVG_PANEL + SVG_GAP), .lo = 0, .hi = 100},
	};
	/* p99 spans decades when a checkpoint's sync stalls: then a log scale. */
	if (lat_hi / lat_lo > 20) {
		p[1].log = true;
		p[1].lo = pow(10, floor(log10(lat_lo)));
		p[1].hi = pow(10, ceil(log10(lat_hi)));
	} else {
		p[1].lo = 0;
		p[1].hi = lat_hi * 1.1;
	}
	int height = (int)(p[2].top + SVG_PANEL + SVG_BOTTOM);
	char buf[512];

	fprintf(f,
	        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n",
	        SVG_W, height, SVG_W, height);
	fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_W,
	        height);
	snprintf(
	    buf, sizeof(buf),
	    "walrus bench %s: %d client%s, %llu keys, %.0f ops/s, p99 %.1f us, %d checkpoint%s",
	    r->workload, r->clients, r->clients == 1 ? "" : "s", (unsigned long long)r->num,
	    r->seconds > 0 ? (double)r->ops / r->seconds : 0.0, r->p99_us, s->nckpts,
	    s->nckpts == 1 ? "" : "s");
	svg_text(f, SVG_LEFT, 24, "start", 16, buf);
	snprintf(buf, sizeof(buf), "shared_buffers %.0f MB, working set %.0f MB; %s",
	         (double)s->nbuffers * (double)WR_PAGE_SIZE / MB,
	         (double)s->kv_pages * (double)WR_PAGE_SIZE / MB, r->datadir);
	svg_text(f, SVG_LEFT, 42, "start", 11, buf);
	/* legend */
	double lx = SVG_W - SVG_RIGHT - 250;
	fprintf(f, "<rect x=\"%.1f\" y=\"32\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", lx,
	        SVG_WRITE);
	svg_text(f, lx + 18, 41, "start", 11, "checkpoint write");
	fprintf(f, "<rect x=\"%.1f\" y=\"32\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", lx + 125,
	        SVG_SYNC);
	svg_text(f, lx + 143, 41, "start", 11, "checkpoint sync");

	for (int i = 0; i < s->nckpts + (s->ckpt_running ? 1 : 0); i++) {
		const bench_ckpt *k = &s->ckpts[i];
		if (!k->complete) {
			svg_shade(&c, p, 3, k->start_s, c.t_max,
			          strcmp(k->reason, "write") == 0 ? SVG_WRITE : SVG_SYNC);
			continue;
		}
		svg_shade(&c, p, 3, k->start_s, k->write_end_s, SVG_WRITE);
		svg_shade(&c, p, 3, k->write_end_s, k->sync_end_s, SVG_SYNC);
	}
	svg_axes(&c, &p[0], rww ? "throughput, ops/s (reads; writer dashed)" : "throughput, ops/s");
	svg_axes(&c, &p[1],
	         p[1].log ? "p99 latency per second, us (log scale)"
	                  : "p99 latency per second, us");
	svg_axes(&c, &p[2], "dirty buffers, % of shared_buffers");
	svg_line(&c, &p[0], s, row_ops, "#2166ac");
	if (rww) {
		fprintf(f, "<g stroke-dasharray=\"5,3\">\n");
		svg_line(&c, &p[0], s, row_writer_ops, "#1a9850");
		fprintf(f, "</g>\n");
	}
	svg_line(&c, &p[1], s, row_p99, "#b2182b");
	g_svg_nbuffers = s->nbuffers;
	svg_line(&c, &p[2], s, row_dirty, "#542788");
	/* x axis under the last panel, tick lines through all */
	double step = nice_step(c.t_max), y_axis = p[2].top + SVG_PANEL;
	for (double t = 0; t <= c.t_max * 1.0001; t += step) {
		double x = svg_x(&c, t);
		snprintf(buf, sizeof(buf), "%g", t);
		svg_text(f, x, y_axis + 16, "middle", 11, buf);
		for (int i = 0; i < 3; i++)
			fprintf(f,
			        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			        "stroke=\"#444\"/>\n",
			        x, p[i].top + SVG_PANEL, x, p[i].top + SVG_PANEL + 4);
	}
	svg_text(f, (SVG_LEFT + SVG_W - SVG_RIGHT) / 2.0, y_axis + 36, "middle", 12,
	         "seconds since the start of the run");
	fprintf(f, "</svg>\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "walrus bench: could not write \"%s\": %s\n", path,
		        strerror(errno));
		return TOOL_EXIT_ENGINE;
	}
	return 0;
}
