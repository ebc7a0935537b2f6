/*
 * test_shm.c - the shared memory segment: creation, regions, attaching by
 * fd from other processes at other addresses, and refusing bad segments.
 */
#include "testutil.h"

#include "ipc/ipc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int shm_fd = -1;

static void teardown(void)
{
	shm_detach();
	if (shm_fd >= 0)
		close(shm_fd);
	shm_fd = -1;
}

static void create_three(void)
{
	size_t sizes[] = {100, 4096, 1};
	size_t size = shm_size_for(sizes, 3);
	ck_assert_int_eq(shm_create(size, WR_HUGE_OFF, &shm_fd), WALRUS_OK);
	ck_assert_ptr_nonnull(shm_alloc("a", sizes[0]));
	ck_assert_ptr_nonnull(shm_alloc("b", sizes[1]));
	ck_assert_ptr_nonnull(shm_alloc("c", sizes[2]));
}

START_TEST(create_and_alloc)
{
	size_t sizes[] = {100, 4096, 1};
	size_t size = shm_size_for(sizes, 3);
	ck_assert_uint_eq(size % 64, 0);
	ck_assert_ptr_null(shm_hdr());
	ck_assert_int_eq(shm_create(size, WR_HUGE_OFF, &shm_fd), WALRUS_OK);
	shm_header *h = shm_hdr();
	ck_assert_ptr_nonnull(h);
	ck_assert_uint_eq(h->magic, SHM_MAGIC);
	ck_assert_uint_eq(h->layout_version, SHM_LAYOUT_VERSION);
	ck_assert_uint_eq(h->size, size);
	ck_assert_uint_eq(atomic_load(&h->state), SHM_STATE_STARTING);

	char *p[3];
	const char *names[] = {"alpha", "beta", "gamma"};
	for (int i = 0; i < 3; i++) {
		p[i] = shm_alloc(names[i], sizes[i]);
		ck_assert_ptr_nonnull(p[i]);
		ck_assert_uint_eq((uintptr_t)p[i] % 64, 0);
		for (size_t j = 0; j < sizes[i]; j++)
			ck_assert_int_eq(p[i][j], 0);
		memset(p[i], 'A' + i, sizes[i]);
	}
	ck_assert(p[1] >= p[0] + sizes[0]);
	ck_assert(p[2] >= p[1] + sizes[1]);
	ck_assert(p[2] + sizes[2] <= shm_base_ + size);
	ck_assert_uint_eq(h->nregions, 3);

	for (int i = 0; i < 3; i++) {
		size_t got = 0;
		ck_assert_ptr_eq(shm_lookup(names[i], &got), p[i]);
		ck_assert_uint_eq(got, sizes[i]);
		ck_assert_int_eq(p[i][sizes[i] - 1], 'A' + i); /* no overlap */
	}
	ck_assert_ptr_null(shm_lookup("delta", NULL));
	ck_assert_ptr_null(shm_alloc("alpha", 1));                       /* duplicate */
	ck_assert_ptr_null(shm_alloc("delta", 1));                       /* no room left */
	ck_assert_ptr_null(shm_alloc("a-name-that-is-far-too-long", 1)); /* name */
	ck_assert_int_eq(h->nregions, 3);
	ck_assert_int_eq(shm_create(size, WR_HUGE_OFF, &shm_fd), WALRUS_EBUSY);
}
END_TEST

START_TEST(table_full)
{
	ck_assert_int_eq(shm_create(1 << 20, WR_HUGE_OFF, &shm_fd), WALRUS_OK);
	char name[SHM_REGION_NAME];
	for (int i = 0; i < SHM_MAX_REGIONS; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		ck_assert_ptr_nonnull(shm_alloc(name, 10));
	}
	ck_assert_ptr_null(shm_alloc("one-too-many", 10));
	ck_assert_ptr_nonnull(shm_lookup("r31", NULL));
}
END_TEST

START_TEST(detach_forgets)
{
	create_three();
	shm_detach();
	ck_assert_ptr_null(shm_hdr());
	ck_assert_ptr_null(shm_base_);
	ck_assert_ptr_null(shm_lookup("a", NULL));
	shm_detach(); /* twice is harmless */
	/* the fd still holds the segment: attach again and find the regions */
	ck_assert_int_eq(shm_attach(shm_fd), WALRUS_OK);
	ck_assert_ptr_nonnull(shm_lookup("b", NULL));
}
END_TEST

/* Map something first so the segment lands at another address, as in a backend. */
static void *displace(void)
{
	void *d = mmap(NULL, 1 << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(d, MAP_FAILED);
	return d;
}

static int child_attach(void *arg)
{
	(void)arg;
	char *old = shm_base_;
	shm_detach();
	void *d = displace();
	void *d2 = mmap(old, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
	                0); /* occupy the parent's address */
	if (shm_attach(shm_fd) != WALRUS_OK)
		return 1;
	if (shm_base_ == old)
		return 2;
	size_t size;
	char *b = shm_lookup("b", &size);
	if (b == NULL || size != 4096 || b[0] != 'b' || b[4095] != 'b')
		return 3;
	b[1] = 'X'; /* seen by the parent through its own mapping */
	uint64_t *ref = shm_lookup("a", NULL);
	if (*(char *)shm_ptr(ref[0]) != 'b')
		return 4; /* an offset stored by the parent resolves here too */
	munmap(d, 1 << 20);
	if (d2 != MAP_FAILED)
		munmap(d2, 4096);
	return 0;
}

START_TEST(fork_attach)
{
	create_three();
	char *b = shm_lookup("b", NULL);
	memset(b, 'b', 4096);
	uint64_t *ref = shm_lookup("a", NULL);
	ref[0] = shm_off(b);
	pid_t pids[3];
	for (int i = 0; i < 3; i++)
		pids[i] = tu_fork(child_attach, NULL);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	ck_assert_int_eq(b[1], 'X');
}
END_TEST

struct where {
	uintptr_t base;
};

/* A process that did not inherit the segment: it gets the fd over a socket. */
static int socket_backend(void *arg)
{
	int sock = *(int *)arg;
	void *d = displace();
	struct where w;
	size_t len;
	int fds[IPC_MAX_FDS], nfds;
	if (ipc_recv(sock, &w, sizeof(w), &len, fds, &nfds) != WALRUS_OK || nfds != 1)
		return 1;
	/* make sure the parent's address is taken here */
	void *d2 = mmap((void *)w.base, 4096, PROT_READ,
	                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (shm_attach(fds[0]) != WALRUS_OK)
		return 2;
	close(fds[0]);
	if ((uintptr_t)shm_base_ == w.base)
		return 3;
	uint64_t *ref = shm_lookup("a", NULL);
	char *c = shm_ptr(ref[0]);
	if (c != shm_lookup("c", NULL) || *c != 'c')
		return 4;
	*c = 'Z';
	munmap(d, 1 << 20);
	if (d2 != MAP_FAILED)
		munmap(d2, 4096);
	return 0;
}

START_TEST(socket_attach)
{
	int sp[2];
	ck_assert_int_eq(ipc_socketpair(sp), WALRUS_OK);
	pid_t pid = tu_fork(socket_backend, &sp[1]); /* forked before the segment exists */
	close(sp[1]);
	create_three();
	char *c = shm_lookup("c", NULL);
	*c = 'c';
	uint64_t *ref = shm_lookup("a", NULL);
	ref[0] = shm_off(c);
	struct where w = {(uintptr_t)shm_base_};
	ck_assert_int_eq(ipc_send(sp[0], &w, sizeof(w), &shm_fd, 1), WALRUS_OK);
	ck_assert_int_eq(tu_wait(pid), 0);
	ck_assert_int_eq(*c, 'Z');
	close(sp[0]);
}
END_TEST

static int memfd_with(const void *buf, size_t len, size_t size)
{
	int fd = memfd_create("not-walrus", MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	if (len > 0)
		ck_assert_int_eq(pwrite(fd, buf, len, 0), (ssize_t)len);
	return fd;
}

START_TEST(attach_garbage)
{
	char junk[8192];
	memset(junk, 0xab, sizeof(junk));
	int fd = memfd_with(junk, sizeof(junk), sizeof(junk));
	ck_assert_int_eq(shm_attach(fd), WALRUS_EPROTO);
	ck_assert_ptr_null(shm_hdr());
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "not a walrus shared memory segment"));
	close(fd);

	fd = memfd_with(NULL, 0, 0); /* empty */
	ck_assert_int_eq(shm_attach(fd), WALRUS_EPROTO);
	close(fd);
	ck_assert_int_lt(shm_attach(fd), 0); /* closed fd: EBADF */
}
END_TEST

START_TEST(attach_bad_header)
{
	create_three();
	shm_header copy = *shm_hdr();
	size_t size = copy.size;
	shm_detach();

	copy.layout_version = SHM_LAYOUT_VERSION + 1;
	int fd = memfd_with(&copy, sizeof(copy), size);
	ck_assert_int_eq(shm_attach(fd), WALRUS_EVERSION);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "version"));
	close(fd);

	copy.layout_version = SHM_LAYOUT_VERSION;
	copy.page_size = WR_PAGE_SIZE == 8192 ? 4096 : 8192; /* another build's pages */
	fd = memfd_with(&copy, sizeof(copy), size);
	ck_assert_int_eq(shm_attach(fd), WALRUS_EVERSION);
	ck_assert_ptr_nonnull(strstr(
	    walrus_errmsg(), "this walrus was built with " TU_PAGE_SIZE_STRING "-byte pages"));
	close(fd);

	copy.page_size = WR_PAGE_SIZE;
	fd = memfd_with(&copy, sizeof(copy), size + 4096); /* size disagrees */
	ck_assert_int_eq(shm_attach(fd), WALRUS_EPROTO);
	close(fd);

	copy.regions[1].size = size; /* region past the end */
	fd = memfd_with(&copy, sizeof(copy), size);
	ck_assert_int_eq(shm_attach(fd), WALRUS_EPROTO);
	close(fd);
	ck_assert_ptr_null(shm_hdr());

	ck_assert_int_eq(shm_attach(shm_fd), WALRUS_OK); /* the real one still works */
	ck_assert_int_eq(shm_attach(shm_fd), WALRUS_EBUSY);
}
END_TEST

START_TEST(size_is_sealed)
{
	create_three();
	ck_assert_int_ne(ftruncate(shm_fd, 0), 0);
	ck_assert_int_eq(errno, EPERM);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ipc-shm");
	TCase *tc = tcase_create("shm");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, create_and_alloc);
	tcase_add_test(tc, table_full);
	tcase_add_test(tc, detach_forgets);
	tcase_add_test(tc, fork_attach);
	tcase_add_test(tc, socket_attach);
	tcase_add_test(tc, attach_garbage);
	tcase_add_test(tc, attach_bad_header);
	tcase_add_test(tc, size_is_sealed);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
