/*
 * clientclock.c: an LD_PRELOAD shim for a chaos client process whose clocks libfaketime
 * runs off the real rate, so that its waits still end when they should, and so that the
 * harness can still read the machine's real CLOCK_MONOTONIC in it.
 *
 * Theory of operation (chaos/clock.py, `client_env`, has the Python side):
 *
 *   libfaketime (as the `libfaketime` wheel builds it) fakes every clock a process reads
 *   through libc: CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME and
 *   the coarse ones, all from one base (with "+0 xR", the wall time at the process's start)
 *   and at rate R. It does NOT wrap the waits that take an absolute time on those clocks,
 *   and CPython computes every timed wait that way: time.sleep() is
 *   clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, now + d), a lock or Event wait is
 *   sem_clockwait(CLOCK_MONOTONIC, now + d), with `now` the faked reading. The kernel
 *   compares that with the real clock, which is decades behind the fake one: a 2 ms sleep
 *   would last years. (libfaketime wraps pthread_cond_timedwait itself: left to it.)
 *
 *   So each absolute wait is turned into one on the real clock that lasts what it has
 *   left on the faked clock: real_now + (deadline - fake_now). The wait keeps its nominal
 *   length in real seconds, as the relative timeouts the kernel times (poll, select,
 *   socket timeouts) do anyway; only what the process READS runs at R. Redlock's safety
 *   depends on what the holder reads (its validity, its deadline), not on how long its
 *   timers take, and the harness's schedule for the worker (`at`, `until`) is in real
 *   seconds.
 *
 *   The real clock is read by the system call itself (syscall(SYS_clock_gettime)), which
 *   libfaketime does not wrap: that is the machine's one CLOCK_MONOTONIC, the clock every
 *   other process of a run stamps its history with. `chaos_real_monotonic()` hands it to
 *   the worker (by ctypes) to stamp this client's history with.
 *
 *   `fake_now` comes from clock_gettime(), which resolves to libfaketime's when it is
 *   preloaded (this library defines no clock_gettime). Without libfaketime the two readings
 *   agree and every wait passes through unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000LL
/* Longer waits than this (about 31 years) are "forever": clamped so as not to overflow. */
#define FOREVER_NS 1000000000000000000LL

static int real_clock(clockid_t id, struct timespec *ts) { return (int)syscall(SYS_clock_gettime, id, ts); }

double chaos_real_monotonic(void)
{
  struct timespec ts;
  if (real_clock(CLOCK_MONOTONIC, &ts) != 0) return -1.0;
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The real-clock deadline of an absolute wait on `id` whose deadline is in the faked clock. */
static struct timespec to_real(clockid_t id, const struct timespec *deadline)
{
  struct timespec fake, real, out;
  if (clock_gettime(id, &fake) != 0 || real_clock(id, &real) != 0) return *deadline;
  int64_t seconds = (int64_t)deadline->tv_sec - (int64_t)fake.tv_sec;
  int64_t left;
  if (seconds > FOREVER_NS / NS) left = FOREVER_NS;
  else if (seconds < -FOREVER_NS / NS) left = 0;
  else left = seconds * NS + ((int64_t)deadline->tv_nsec - (int64_t)fake.tv_nsec);
  if (left < 0) left = 0;
  int64_t at = (int64_t)real.tv_sec * NS + real.tv_nsec + left;
  out.tv_sec = (time_t)(at / NS);
  out.tv_nsec = (long)(at % NS);
  return out;
}

/* The next definition of `name` (libc's), looked up once; without one, `fail`s. */
#define REAL(name, fail) \
  static __typeof__(name) *real_##name; \
  if (real_##name == NULL) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name); \
  if (real_##name == NULL) fail

/* These two report an error by their result; the semaphore waits, by errno. */
#define NO_RESULT return ENOSYS
#define NO_ERRNO do { errno = ENOSYS; return -1; } while (0)

int clock_nanosleep(clockid_t id, int flags, const struct timespec *request, struct timespec *remain)
{
  REAL(clock_nanosleep, NO_RESULT);
  if (!(flags & TIMER_ABSTIME)) return real_clock_nanosleep(id, flags, request, remain);
  struct timespec real = to_real(id, request);
  return real_clock_nanosleep(id, flags, &real, remain);
}

int pthread_cond_clockwait(pthread_cond_t *cond, pthread_mutex_t *mutex, clockid_t id, const struct timespec *deadline)
{
  REAL(pthread_cond_clockwait, NO_RESULT);
  struct timespec real = to_real(id, deadline);
  return real_pthread_cond_clockwait(cond, mutex, id, &real);
}

int sem_clockwait(sem_t *sem, clockid_t id, const struct timespec *deadline)
{
  REAL(sem_clockwait, NO_ERRNO);
  struct timespec real = to_real(id, deadline);
  return real_sem_clockwait(sem, id, &real);
}

int sem_timedwait(sem_t *sem, const struct timespec *deadline)
{
  REAL(sem_timedwait, NO_ERRNO);
  struct timespec real = to_real(CLOCK_REALTIME, deadline);
  return real_sem_timedwait(sem, &real);
}
