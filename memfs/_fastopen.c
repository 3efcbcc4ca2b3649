/* memfs fast opens: answer a warm read-only open without entering Python.
 *
 * Why: a warm `grep -r` costs three FUSE requests per file (OPEN, FLUSH, RELEASE), each a trip
 * through pyfuse3's trio loop and a Python handler; the page cache already holds the bytes.
 * For an inode that memfs has marked "fast" (its next read-only open would keep the cache:
 * the last one did and nothing about its content changed since, or the kernel never saw the
 * file, so it holds no pages of it), this shim answers OPEN here:
 * keep_cache, FOPEN_NOFLUSH (so close() sends no FLUSH) and a handle that names the inode
 * (FAST_BIT | ino), whose RELEASE and FLUSH it also answers here. Every other request goes
 * to pyfuse3 unchanged; READs and FSYNCs on a fast handle reach Python, which acts by inode
 * (an fsync on a read-only descriptor must still make the file's content power-safe).
 *
 * How: loaded with RTLD_GLOBAL before pyfuse3, this library's fuse_session_new@FUSE_3.0 is
 * the one pyfuse3 binds to; it copies pyfuse3's op table, swaps in the three wrappers and
 * calls libfuse's own fuse_session_new. memfs_fastopen_active() says whether that happened;
 * when it did not (library missing, pyfuse3 imported first, a different op table size),
 * every open goes to Python as before.
 *
 * The loop: answering in C saves the Python handler, not pyfuse3's trio round per request
 * (wait_readable, a lock handed between its worker tasks: about half the cost). So this
 * library's fuse_session_receive_buf@FUSE_3.0, which pyfuse3 calls once the fd is readable,
 * keeps going while the requests are ones the wrappers answer: it processes each one here
 * and waits up to FOLLOW_NS for the next. The first request that needs Python is returned
 * to pyfuse3 as usual; with none, it returns -EINTR, which pyfuse3's loop takes as "read
 * again" (back to trio's wait_readable). A batch ends after BATCH_MAX requests or BATCH_NS,
 * so trio's other tasks (uploads, the reconciler) never wait longer than that.
 *
 * Threading: pyfuse3 runs libfuse's dispatch on the trio thread, the same thread that calls
 * memfs_fast_add/discard, so the set needs no lock.
 */
#define FUSE_USE_VERSION 34
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAST_BIT ((uint64_t)1 << 62)
#define FOLLOW_NS 300000L  /* wait this long for the next request of a burst */
#define BATCH_NS 4000000L  /* then give trio its turn */
#define BATCH_MAX 512

typedef struct fuse_session *(*session_new_fn)(struct fuse_args *, const struct fuse_lowlevel_ops *,
                                               size_t, void *);
typedef int (*receive_fn)(struct fuse_session *, struct fuse_buf *);

static struct fuse_lowlevel_ops real_ops, shim_ops;
static int active;
static uint64_t answered; /* opens answered here, for `memfs status` and the tests */

/* The fast inodes: open addressing, linear probing, 0 = empty (inode 0 does not exist). */
static uint64_t *slots;
static size_t cap, used;

static size_t home(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static size_t find(uint64_t ino) { /* the slot holding ino, or the empty slot ending its run */
    size_t i = home(ino);
    while (slots[i] && slots[i] != ino)
        i = (i + 1) & (cap - 1);
    return i;
}

static int grow(void) {
    uint64_t *old = slots;
    size_t old_cap = cap, i;
    size_t new_cap = cap ? cap * 2 : 1024;
    uint64_t *fresh = calloc(new_cap, sizeof *fresh);
    if (!fresh)
        return -1;
    slots = fresh;
    cap = new_cap;
    for (i = 0; i < old_cap; i++)
        if (old[i])
            slots[find(old[i])] = old[i];
    free(old);
    return 0;
}

int memfs_fast_add(uint64_t ino) {
    size_t i;
    if (!ino || (ino & FAST_BIT))
        return -1;
    if ((used + 1) * 2 > cap && grow())
        return -1;
    i = find(ino);
    if (!slots[i]) {
        slots[i] = ino;
        used++;
    }
    return 0;
}

int memfs_fast_has(uint64_t ino) {
    return cap && ino && slots[find(ino)] == ino;
}

void memfs_fast_discard(uint64_t ino) {
    size_t i, j, k;
    if (!cap || !ino)
        return;
    i = find(ino);
    if (!slots[i])
        return;
    slots[i] = 0;
    used--;
    /* Backward-shift: move later entries of the run into the hole when their home allows. */
    for (j = (i + 1) & (cap - 1); slots[j]; j = (j + 1) & (cap - 1)) {
        k = home(slots[j]);
        if ((j > i) ? (k <= i || k > j) : (k <= i && k > j)) {
            slots[i] = slots[j];
            slots[j] = 0;
            i = j;
        }
    }
}

void memfs_fast_clear(void) {
    if (cap)
        memset(slots, 0, cap * sizeof *slots);
    used = 0;
}

size_t memfs_fast_count(void) { return used; }

uint64_t memfs_fast_answered(void) { return answered; }

int memfs_fastopen_active(void) { return active; }

/* The two conditions, shared by the wrappers below and by answered_here(). */
static int fast_open(uint32_t flags, uint64_t ino) {
    return (flags & O_ACCMODE) == O_RDONLY && !(flags & O_TRUNC) && memfs_fast_has(ino);
}

static int fast_fh(uint64_t fh) { return (fh & FAST_BIT) != 0; }

static int fast_handle(const struct fuse_file_info *fi) { return fi && fast_fh(fi->fh); }

static void shim_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (fast_open((uint32_t)fi->flags, ino)) {
        fi->fh = FAST_BIT | ino;
        fi->keep_cache = 1;
        fi->direct_io = 0;
        fi->noflush = 1;
        answered++;
        fuse_reply_open(req, fi);
        return;
    }
    real_ops.open(req, ino, fi);
}

static void shim_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (fast_handle(fi))
        fuse_reply_err(req, 0);
    else
        real_ops.release(req, ino, fi);
}

static void shim_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (fast_handle(fi))
        fuse_reply_err(req, 0);
    else
        real_ops.flush(req, ino, fi);
}

struct fuse_session *fuse_session_new(struct fuse_args *args, const struct fuse_lowlevel_ops *op,
                                      size_t op_size, void *userdata) {
    session_new_fn real = (session_new_fn)dlvsym(RTLD_NEXT, "fuse_session_new", "FUSE_3.0");
    struct fuse_session *se;
    if (!real)
        real = (session_new_fn)dlsym(RTLD_NEXT, "fuse_session_new");
    if (!real)
        return NULL;
    if (op_size != sizeof real_ops || !op->open || !op->release || !op->flush)
        return real(args, op, op_size, userdata); /* not the table we know: change nothing */
    memcpy(&real_ops, op, sizeof real_ops);
    shim_ops = real_ops;
    shim_ops.open = shim_open;
    shim_ops.release = shim_release;
    shim_ops.flush = shim_flush;
    se = real(args, &shim_ops, op_size, userdata);
    active = se != NULL;
    return se;
}

/* Would the wrappers above answer this request without Python? Their own conditions. */
static int answered_here(const struct fuse_buf *buf, size_t len) {
    const struct fuse_in_header *in = buf->mem;
    const void *arg = (const char *)buf->mem + sizeof *in;
    if ((buf->flags & FUSE_BUF_IS_FD) || len < sizeof *in)
        return 0;
    switch (in->opcode) {
    case FUSE_OPEN: {
        const struct fuse_open_in *o = arg;
        return len >= sizeof *in + sizeof *o && fast_open(o->flags, in->nodeid);
    }
    case FUSE_RELEASE:
        return len >= sizeof *in + sizeof(struct fuse_release_in) &&
               fast_fh(((const struct fuse_release_in *)arg)->fh);
    case FUSE_FLUSH:
        return len >= sizeof *in + sizeof(struct fuse_flush_in) &&
               fast_fh(((const struct fuse_flush_in *)arg)->fh);
    default:
        return 0;
    }
}

static long elapsed_ns(const struct timespec *since) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - since->tv_sec) * 1000000000L + (now.tv_nsec - since->tv_nsec);
}

int fuse_session_receive_buf(struct fuse_session *se, struct fuse_buf *buf) {
    static receive_fn real;
    struct timespec start, follow = {0, FOLLOW_NS};
    struct pollfd pfd;
    int res, n = 0;
    if (!real)
        real = (receive_fn)dlvsym(RTLD_NEXT, "fuse_session_receive_buf", "FUSE_3.0");
    if (!real)
        real = (receive_fn)dlsym(RTLD_NEXT, "fuse_session_receive_buf");
    if (!real)
        return -ENOSYS;
    res = real(se, buf);
    if (!active || res <= 0 || !answered_here(buf, (size_t)res))
        return res;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pfd.fd = fuse_session_fd(se);
    for (;;) {
        fuse_session_process_buf(se, buf);
        if (++n >= BATCH_MAX || elapsed_ns(&start) >= BATCH_NS)
            return -EINTR;
        pfd.events = POLLIN;
        pfd.revents = 0;
        if (ppoll(&pfd, 1, &follow, NULL) <= 0 || !(pfd.revents & POLLIN))
            return -EINTR; /* quiet, or unmounting: pyfuse3's own loop takes over */
        res = real(se, buf);
        if (res <= 0 || !answered_here(buf, (size_t)res))
            return res;
    }
}
