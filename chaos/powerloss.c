/*
 * powerloss.c: an LD_PRELOAD shim that records what a process made durable, so that the
 * chaos harness can cut its power: roll every file back to what the disk would have kept.
 *
 * Theory of operation (chaos/powerloss.py has the Python side):
 *
 *   The model is LazyFS's (Jepsen's FUSE file system for lost writes): file DATA reaches
 *   the disk only when the process fsyncs it; NAMESPACE operations (create, rename,
 *   unlink, truncate) reach it at once. So, per file (an inode: renames do not matter),
 *   the disk holds the first `durable` bytes, where `durable` is
 *     - the size the file had when an fsync/fdatasync of it began (the kernel writes
 *       back at least what was written before the call; we keep no more, the lossy and
 *       still possible outcome for bytes written during it);
 *     - 0 for a file this process created (open/fopen with O_CREAT of a missing path);
 *     - at most the new length after a truncation (O_TRUNC, ftruncate, truncate).
 *   Data is only ever appended past `durable` by the programs this serves (Redis's AOF,
 *   its manifest and RDB files are written front to back, and whole files are replaced by
 *   rename), so "truncate to `durable`" restores exactly the durable content.
 *
 *   Each event is one line appended, with one write(2) on an O_APPEND descriptor, to the
 *   file named by $REDLOCK_POWERLOSS_LOG, which the harness reads after SIGKILL (it is in
 *   the page cache; nothing is lost by killing the process):
 *       S <dev> <ino> <size>   durable = size          (fsync, fdatasync; create: 0)
 *       T <dev> <ino> <size>   durable = min(durable, size)      (a truncation)
 *       X <what>               something this model cannot follow (O_SYNC, sync(2)):
 *                              the harness refuses to cut the power rather than guess.
 *   The line is written after the call succeeded: a process killed during an fsync is
 *   taken to have lost the fsync, which a power cut at that instant could do too.
 *   Forked children (a rewrite) inherit the variable and append to the same file.
 *
 * Without $REDLOCK_POWERLOSS_LOG every function is a plain pass-through.
 * Only the entry points the Redis and Valkey binaries import are needed (nm -D); the
 * openat and creat families are covered as well, so that no way to create a file is
 * missed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define LOG_ENV "REDLOCK_POWERLOSS_LOG"

static void emit(const char *line, size_t len) {
    const char *path = getenv(LOG_ENV);
    if (path == NULL || *path == '\0') return;
    int saved = errno;
    /* Raw syscalls: our own open must not come back through the wrappers below. */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        ssize_t ignored = syscall(SYS_write, fd, line, len);
        (void)ignored;
        syscall(SYS_close, fd);
    }
    errno = saved;
}

static int tracking(void) {
    const char *path = getenv(LOG_ENV);
    return path != NULL && *path != '\0';
}

static void record(char op, const struct stat *st, long long size) {
    if (!S_ISREG(st->st_mode)) return;
    char line[96];
    int n = snprintf(line, sizeof line, "%c %llu %llu %lld\n", op, (unsigned long long)st->st_dev,
                     (unsigned long long)st->st_ino, size);
    if (n > 0 && (size_t)n < sizeof line) emit(line, (size_t)n);
}

static void record_fd(char op, int fd, long long size) {
    struct stat st;
    if (fstat(fd, &st) == 0) record(op, &st, size < 0 ? (long long)st.st_size : size);
}

static void unsupported(const char *what) {
    char line[160];
    int n = snprintf(line, sizeof line, "X %s\n", what);
    if (n > 0 && (size_t)n < sizeof line) emit(line, (size_t)n);
}

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name)                            \
    static __typeof__(&name) real_##name;     \
    if (real_##name == NULL) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

/* -- opening: creation and O_TRUNC ------------------------------------------------------ */

/* Whether `path` (relative to `dirfd`) exists now: asked before an O_CREAT open, so that
 * the open can tell a file it creates (durable: nothing) from one it opens. */
static int exists_at(int dirfd, const char *path) {
    struct stat st;
    return fstatat(dirfd, path, &st, 0) == 0;
}

static void opened(int fd, int flags, int created) {
    if (fd < 0 || !tracking()) return;
    if (created)
        record_fd('S', fd, 0);
    else if (flags & O_TRUNC)
        record_fd('T', fd, 0);
    if (flags & (O_SYNC | O_DSYNC)) unsupported("open with O_SYNC or O_DSYNC (every write durable)");
}

/* What an open is about to do: 1 if it may create the file (O_CREAT, path missing). */
static int will_create(int dirfd, const char *path, int flags) {
    return (flags & O_CREAT) && tracking() && !exists_at(dirfd, path);
}

static mode_t mode_arg(int flags, va_list args) {
    return (flags & (O_CREAT | __O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

#define OPEN_WRAPPER(name)                                                   \
    int name(const char *path, int flags, ...) {                             \
        REAL(name);                         \
        va_list args;                                                        \
        va_start(args, flags);                                               \
        mode_t mode = mode_arg(flags, args);                                 \
        va_end(args);                                                        \
        int creates = will_create(AT_FDCWD, path, flags);                    \
        int fd = real_##name(path, flags, mode);                             \
        opened(fd, flags, creates);                                          \
        return fd;                                                           \
    }

#define OPENAT_WRAPPER(name)                                                 \
    int name(int dirfd, const char *path, int flags, ...) {                  \
        REAL(name);                    \
        va_list args;                                                        \
        va_start(args, flags);                                               \
        mode_t mode = mode_arg(flags, args);                                 \
        va_end(args);                                                        \
        int creates = will_create(dirfd, path, flags);                       \
        int fd = real_##name(dirfd, path, flags, mode);                      \
        opened(fd, flags, creates);                                          \
        return fd;                                                           \
    }

#define CREAT_WRAPPER(name)                                                  \
    int name(const char *path, mode_t mode) {                                \
        REAL(name);                           \
        int flags = O_WRONLY | O_CREAT | O_TRUNC;                            \
        int creates = will_create(AT_FDCWD, path, flags);                    \
        int fd = real_##name(path, mode);                                    \
        opened(fd, flags, creates);                                          \
        return fd;                                                           \
    }

OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)
CREAT_WRAPPER(creat)
CREAT_WRAPPER(creat64)

/* fopen's modes as open(2) flags: "w" creates and truncates, "a" creates, "r" neither. */
static int fopen_flags(const char *mode) {
    if (mode[0] == 'w') return O_CREAT | O_TRUNC;
    if (mode[0] == 'a') return O_CREAT;
    return 0;
}

static FILE *fopen_common(FILE *(*real)(const char *, const char *), const char *path, const char *mode) {
    int flags = fopen_flags(mode);
    int creates = will_create(AT_FDCWD, path, flags);
    FILE *fp = real(path, mode);
    if (fp != NULL) opened(fileno(fp), flags, creates);
    return fp;
}

FILE *fopen(const char *path, const char *mode) {
    REAL(fopen);
    return fopen_common(real_fopen, path, mode);
}

FILE *fopen64(const char *path, const char *mode) {
    REAL(fopen64);
    return fopen_common(real_fopen64, path, mode);
}

/* -- syncing ---------------------------------------------------------------------------- */

static int sync_common(int fd, int (*real)(int)) {
    struct stat before;
    int known = tracking() && fstat(fd, &before) == 0;
    int result = real(fd);
    if (result == 0 && known) record('S', &before, (long long)before.st_size);
    return result;
}

int fsync(int fd) {
    REAL(fsync);
    return sync_common(fd, real_fsync);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    return sync_common(fd, real_fdatasync);
}

void sync(void) {
    REAL(sync);
    unsupported("sync(2)");
    real_sync();
}

int syncfs(int fd) {
    REAL(syncfs);
    unsupported("syncfs(2)");
    return real_syncfs(fd);
}

/* -- truncating ------------------------------------------------------------------------- */

int ftruncate(int fd, off_t length) {
    REAL(ftruncate);
    int result = real_ftruncate(fd, length);
    if (result == 0 && tracking()) record_fd('T', fd, (long long)length);
    return result;
}

int ftruncate64(int fd, off64_t length) {
    REAL(ftruncate64);
    int result = real_ftruncate64(fd, length);
    if (result == 0 && tracking()) record_fd('T', fd, (long long)length);
    return result;
}

static void truncated_path(const char *path, long long length) {
    struct stat st;
    if (tracking() && stat(path, &st) == 0) record('T', &st, length);
}

int truncate(const char *path, off_t length) {
    REAL(truncate);
    int result = real_truncate(path, length);
    if (result == 0) truncated_path(path, (long long)length);
    return result;
}

int truncate64(const char *path, off64_t length) {
    REAL(truncate64);
    int result = real_truncate64(path, length);
    if (result == 0) truncated_path(path, (long long)length);
    return result;
}
