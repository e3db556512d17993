/* Small helpers every Tandem process uses: clocks, logging, wake-up fds
 * and random seeds. No state lives here. */
#ifndef TANDEM_COMMON_SYS_H
#define TANDEM_COMMON_SYS_H
#include <stddef.h>
#include <stdint.h>

/* Monotonic milliseconds and seconds (for timeouts and rates). */
uint64_t tn_now_ms(void);
double tn_now_s(void);
/* Wall-clock milliseconds since the Unix epoch: the one clock two hosts
 * share (NTP-synchronised), for deadlines that cross processes. */
uint64_t tn_wall_ms(void);

/* One log line on stderr: "HH:MM:SS.mmm who: message". */
void tn_log(const char *who, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A non-blocking eventfd used to wake a thread blocked in poll(). */
int tn_wakefd_open(void);
void tn_wakefd_signal(int fd);
/* Consumes pending wake-ups; never blocks. */
void tn_wakefd_drain(int fd);

/* 64 random bits from the kernel (getrandom); falls back to the clock mixed
 * with the pid only if the kernel refuses. */
uint64_t tn_random_u64(void);

/* Blocks SIGINT and SIGTERM in the calling thread (call it from main
 * before starting threads, which inherit the mask) and returns a signalfd
 * that reports them, or -1. Threads that existed before main (a BLAS
 * library's pool) do not block them; a handler there forwards the signal to
 * the main thread, so it always reaches the signalfd instead of killing the
 * process uncleanly. Also ignores SIGPIPE. */
int tn_signalfd_open(void);

/* Writes text to path atomically (temp file + rename) so a reader never
 * sees half a file. Returns 0 or -1 with errno. */
int tn_write_file_atomic(const char *path, const char *text);

#endif
