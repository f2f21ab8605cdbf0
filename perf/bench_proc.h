/*
 * bench_proc.h - a benchmark's peer process: the program forks itself, the
 * child runs the peer (a transfer target, an echo server) and announces
 * itself with one line on a pipe ("segment HOST:PORT", "port N"); the parent
 * reads that line and measures against the child. The child dies with the
 * parent (PR_SET_PDEATHSIG) and blocks SIGTERM, which fn may sigwait for.
 *
 * Fork before any thread exists (the child has only the forking thread).
 * bench_cpu_us reads any process's CPU time (a daemon under measurement).
 * The daemons a benchmark starts are programs: test/integration/proc.h.
 */
#ifndef MC_PERF_BENCH_PROC_H
#define MC_PERF_BENCH_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* The child's work: announce on fd (one line, '\n'-terminated), serve, and
 * return the child's exit status. */
typedef int (*bench_child_fn)(void *arg, int fd);

/* Fork a child running fn(arg, fd); its first line, without the '\n', into
 * line[0..len) within timeout_ms. The child's pid, or -1 (the child said
 * nothing in time or exited: it is reaped, the reason printed on stderr,
 * prefixed by who). */
pid_t bench_fork(const char *who, bench_child_fn fn, void *arg, char *line, size_t len,
                 int timeout_ms);

/* SIGTERM the child and reap it (pid <= 0: nothing). */
void bench_reap(pid_t pid);

/* CPU time (user + system) process pid has used, in microseconds, from
 * /proc; -1 when unknown. */
long long bench_cpu_us(pid_t pid);

#endif /* MC_PERF_BENCH_PROC_H */
