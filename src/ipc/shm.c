/*
 * shm.c - the instance's shared memory segment: one memfd, mapped
 * MAP_SHARED by every process of the instance.
 *
 * Interface: shm_size_for, shm_create, shm_attach, shm_detach,
 * shm_set_unmap_hook, shm_hdr, shm_alloc, shm_lookup (see ipc.h).
 *
 * Notes.  The supervisor creates the segment and carves its regions once,
 * before any other process can see it; attachers get the fd over a socket
 * (or inherit it across fork), so the header needs no lock: the socket
 * send/receive orders the creator's writes before the attacher's reads.
 * A fresh memfd reads as zeroes, so regions are not cleared by hand: that
 * would allocate every page of a large buffer pool at start.  The size is
 * sealed (F_SEAL_SHRINK/GROW), because one process truncating the file would
 * make every other process fault (SIGBUS) on its next touch.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_ALIGN 64

char *shm_base_;
static size_t shm_size_;
static void (*_Atomic shm_unmap_hook)(void);

static size_t header_size(void)
{
	return WR_ALIGN_UP(sizeof(shm_header), SHM_ALIGN);
}

size_t shm_size_for(const size_t *region_sizes, int nregions)
{
	size_t total = header_size();
	for (int i = 0; i < nregions; i++)
		total += WR_ALIGN_UP(region_sizes[i], SHM_ALIGN);
	return total;
}

shm_header *shm_hdr(void)
{
	return (shm_header *)shm_base_;
}

static int map_segment(int fd, size_t size, char **out)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return wr_error(wr_errno_code(errno),
		                "could not map shared memory segment of %zu bytes: %m", size);
	*out = p;
	return WALRUS_OK;
}

static int seal_size(int fd)
{
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return wr_error(wr_errno_code(errno), "could not seal shared memory segment: %m");
	return WALRUS_OK;
}

static void init_header(shm_header *h, size_t size, size_t huge_page_size)
{
	h->magic = SHM_MAGIC;
	h->layout_version = SHM_LAYOUT_VERSION;
	h->nregions = 0;
	h->size = size;
	h->alloc_off = header_size();
	h->huge_page_size = huge_page_size;
	h->page_size = WR_PAGE_SIZE;
	atomic_store_explicit(&h->generation, 0, memory_order_relaxed);
	atomic_store_explicit(&h->state, SHM_STATE_STARTING, memory_order_relaxed);
	atomic_store_explicit(&h->panic_pid, 0, memory_order_relaxed);
}

/*
 * A sealed memfd of *@size, mapped.  A hugetlbfs file (MFD_HUGETLB) reports
 * its page size as its block size: *@size is rounded up to whole pages of
 * it and *@page set, so the header tells the size the kernel really uses.
 */
static int make_segment(unsigned flags, size_t *size, size_t *page, int *fd_out, char **base)
{
	int fd = memfd_create("walrus-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not create shared memory (memfd): %m");
	struct stat st;
	int rc = WALRUS_OK;
	if ((flags & MFD_HUGETLB) && fstat(fd, &st) != 0)
		rc = wr_error(wr_errno_code(errno), "could not stat shared memory memfd: %m");
	if (rc == WALRUS_OK && (flags & MFD_HUGETLB)) {
		*page = (size_t)st.st_blksize;
		*size = WR_ALIGN_UP(*size, *page);
	}
	if (rc == WALRUS_OK && ftruncate(fd, (off_t)*size) != 0)
		rc = wr_error(wr_errno_code(errno),
		              "could not size shared memory segment to %zu bytes: %m", *size);
	if (rc == WALRUS_OK)
		rc = seal_size(fd);
	if (rc == WALRUS_OK)
		rc = map_segment(fd, *size, base);
	if (rc != WALRUS_OK) {
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return WALRUS_OK;
}

/*
 * The segment in huge pages.  Mapping it reserves every page: without
 * enough free in vm.nr_hugepages the mmap fails here with ENOMEM, not a
 * first touch later with SIGBUS.
 */
static int make_huge_segment(size_t *size, size_t *page, int *fd_out, char **base)
{
	size_t want = *size;
	int rc = make_segment(MFD_HUGETLB, &want, page, fd_out, base);
	if (rc == WALRUS_OK) {
		*size = want;
		return WALRUS_OK;
	}
	char why[512];
	(void)wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
	if (*page == 0)
		return wr_error(rc, "huge pages are not available: %s", why);
	return wr_error(rc,
	                "could not get %zu huge pages of %zu kB for %zu MB of shared memory: %s "
	                "(vm.nr_hugepages reserves them)",
	                want / *page, *page >> 10, want >> 20, why);
}

int shm_create(size_t size, int huge, int *fd_out)
{
	if (shm_base_ != NULL)
		return wr_error(WALRUS_EBUSY, "shared memory is already attached in this process");
	if (size < header_size())
		return wr_error(WALRUS_EINVAL,
		                "shared memory size %zu is smaller than its header (%zu bytes)",
		                size, header_size());
	char *base = NULL;
	size_t page = 0;
	bool in_huge = false;
	if (huge != WR_HUGE_OFF) {
		int rc = make_huge_segment(&size, &page, fd_out, &base);
		if (rc != WALRUS_OK && huge == WR_HUGE_ON)
			return rc;
		/* The usual case where nothing is reserved: a debug line, as
		 * PostgreSQL; stats show the page size either way. */
		if (rc != WALRUS_OK)
			wr_log(WR_DEBUG, "huge_pages = try: using normal pages (%s)",
			       walrus_errmsg());
		in_huge = rc == WALRUS_OK;
	}
	if (!in_huge) {
		page = 0;
		int rc = make_segment(0, &size, &page, fd_out, &base);
		if (rc != WALRUS_OK)
			return rc;
	}
	init_header((shm_header *)base, size, page);
	shm_base_ = base;
	shm_size_ = size;
	return WALRUS_OK;
}

/* The header of a received segment is untrusted until every field checks out. */
static int check_header(const shm_header *h, size_t size)
{
	if (h->magic != SHM_MAGIC)
		return wr_error(WALRUS_EPROTO,
		                "received fd is not a walrus shared memory segment "
		                "(magic 0x%016llx, expected 0x%016llx)",
		                (unsigned long long)h->magic, (unsigned long long)SHM_MAGIC);
	if (h->layout_version != SHM_LAYOUT_VERSION)
		return wr_error(WALRUS_EVERSION,
		                "shared memory layout version %u is not supported (this library "
		                "uses version %u): the instance runs a different walrus build",
		                h->layout_version, SHM_LAYOUT_VERSION);
	/* A backend of another page size would read the pool's pages wrong
	 * and write them wrong: refused as the control file refuses it. */
	if (h->page_size != WR_PAGE_SIZE)
		return wr_error(WALRUS_EVERSION,
		                "the instance uses pages of %u bytes but this walrus was built "
		                "with %d-byte pages (-Dpage_size): use a walrus of the instance's "
		                "page size",
		                h->page_size, WR_PAGE_SIZE);
	if (h->size != size)
		return wr_error(WALRUS_EPROTO,
		                "shared memory header says %llu bytes but the segment has %zu",
		                (unsigned long long)h->size, size);
	if (h->nregions > SHM_MAX_REGIONS)
		return wr_error(WALRUS_EPROTO, "shared memory header lists %u regions (max %d)",
		                h->nregions, SHM_MAX_REGIONS);
	for (uint32_t i = 0; i < h->nregions; i++) {
		const shm_region *r = &h->regions[i];
		if (r->off < header_size() || r->off > size || r->size > size - r->off)
			return wr_error(WALRUS_EPROTO,
			                "shared memory region %u lies outside the segment", i);
	}
	return WALRUS_OK;
}

int shm_attach(int fd)
{
	if (shm_base_ != NULL)
		return wr_error(WALRUS_EBUSY, "shared memory is already attached in this process");
	struct stat st;
	if (fstat(fd, &st) != 0)
		return wr_error(wr_errno_code(errno), "could not stat shared memory fd %d: %m", fd);
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size < sizeof(shm_header))
		return wr_error(WALRUS_EPROTO,
		                "received fd is not a walrus shared memory segment (%lld bytes)",
		                (long long)st.st_size);
	size_t size = (size_t)st.st_size;
	char *base = NULL;
	int rc = map_segment(fd, size, &base);
	if (rc != WALRUS_OK)
		return rc;
	rc = check_header((const shm_header *)base, size);
	if (rc != WALRUS_OK) {
		munmap(base, size);
		return rc;
	}
	shm_base_ = base;
	shm_size_ = size;
	return WALRUS_OK;
}

void shm_set_unmap_hook(void (*fn)(void))
{
	atomic_store(&shm_unmap_hook, fn);
}

void shm_detach(void)
{
	if (shm_base_ == NULL)
		return;
	void (*hook)(void) = atomic_load(&shm_unmap_hook);
	if (hook != NULL)
		hook();
	/* munmap of a mapping we made can only fail on a bug; nothing to undo then. */
	(void)munmap(shm_base_, shm_size_);
	shm_base_ = NULL;
	shm_size_ = 0;
}

static shm_region *find_region(shm_header *h, const char *name)
{
	for (uint32_t i = 0; i < h->nregions; i++)
		if (strncmp(h->regions[i].name, name, SHM_REGION_NAME) == 0)
			return &h->regions[i];
	return NULL;
}

void *shm_alloc(const char *name, size_t size)
{
	shm_header *h = shm_hdr();
	if (h == NULL) {
		wr_error(WALRUS_EINTERNAL, "shm_alloc(\"%s\") without shared memory", name);
		return NULL;
	}
	if (name[0] == '\0' || strlen(name) >= SHM_REGION_NAME) {
		wr_error(WALRUS_EINVAL, "bad shared memory region name \"%s\"", name);
		return NULL;
	}
	if (find_region(h, name) != NULL) {
		wr_error(WALRUS_EINVAL, "shared memory region \"%s\" already exists", name);
		return NULL;
	}
	if (h->nregions >= SHM_MAX_REGIONS) {
		wr_error(WALRUS_ELIMIT, "too many shared memory regions (max %d) for \"%s\"",
		         SHM_MAX_REGIONS, name);
		return NULL;
	}
	uint64_t off = WR_ALIGN_UP(h->alloc_off, SHM_ALIGN);
	if (off > h->size || size > h->size - off) {
		wr_error(WALRUS_ENOMEM,
		         "shared memory region \"%s\" (%zu bytes) does not fit: %llu of %llu "
		         "bytes used",
		         name, size, (unsigned long long)off, (unsigned long long)h->size);
		return NULL;
	}
	shm_region *r = &h->regions[h->nregions++];
	memset(r, 0, sizeof(*r));
	strcpy(r->name, name);
	r->off = off;
	r->size = size;
	h->alloc_off = off + size;
	return shm_ptr(off);
}

void *shm_lookup(const char *name, size_t *size)
{
	shm_header *h = shm_hdr();
	if (h == NULL)
		return NULL;
	shm_region *r = find_region(h, name);
	if (r == NULL)
		return NULL;
	if (size != NULL)
		*size = r->size;
	return shm_ptr(r->off);
}
