/* bench_proc.c - a benchmark's peer process (see bench_proc.h). */
#include "perf/bench_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/time.h"

/* The child's side: never outlive the parent, SIGTERM for sigwait. */
static void child_run(pid_t parent, int fd, bench_child_fn fn, void *arg)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(1);
    _exit(fn(arg, fd));
}

/* The first line of fd within timeout_ms, into line; 0, or -1. */
static int read_line(int fd, char *line, size_t len, int timeout_ms)
{
    size_t got = 0;
    uint64_t end = mc_now_us() + (uint64_t)timeout_ms * 1000;
    line[0] = '\0';
    while (got < len - 1 && memchr(line, '\n', got) == NULL) {
        uint64_t now = mc_now_us();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (now >= end || poll(&p, 1, (int)((end - now) / 1000) + 1) <= 0)
            return -1;
        ssize_t n = read(fd, line + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    line[got] = '\0';
    char *nl = strchr(line, '\n');
    if (nl == NULL)
        return -1;
    *nl = '\0';
    return 0;
}

pid_t bench_fork(const char *who, bench_child_fn fn, void *arg, char *line, size_t len,
                 int timeout_ms)
{
    int fds[2];
    if (len < 2 || pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", who, strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        child_run(parent, fds[1], fn, arg);
    }
    close(fds[1]);
    int rc = read_line(fds[0], line, len, timeout_ms);
    close(fds[0]);
    if (rc != 0) {
        fprintf(stderr, "%s: the peer process did not start (see its errors above)\n", who);
        bench_reap(pid);
        return -1;
    }
    return pid;
}

void bench_reap(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

long long bench_cpu_us(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut, st;
    /* after ")": state, then fields 4..13, then utime (14) and stime (15) */
    if (p == NULL ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)((ut + st) * 1000000ull / (unsigned long long)sysconf(_SC_CLK_TCK));
}
