/*
 * proc.h - spawn and stop helper processes: the integration tests (through
 * cluster.h) and the benchmarks that start daemons (perf/store_bench,
 * perf/master_bench). Header-only so each program stays one .c file.
 */
#ifndef MC_TEST_PROC_H
#define MC_TEST_PROC_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct test_proc {
    pid_t pid;
    int out_fd; /* child's stdout */
} test_proc_t;

/* Path of a test helper binary: $TEST_BIN_DIR/name (default build/test/bin). */
static inline const char *test_bin(const char *name, char *buf, size_t len)
{
    const char *dir = getenv("TEST_BIN_DIR");
    snprintf(buf, len, "%s/%s", dir ? dir : "build/test/bin", name);
    return buf;
}

/* Path of a built program: $TEST_BUILD_DIR/name (default build). */
static inline const char *test_prog(const char *name, char *buf, size_t len)
{
    const char *dir = getenv("TEST_BUILD_DIR");
    snprintf(buf, len, "%s/%s", dir ? dir : "build", name);
    return buf;
}

/* Start argv[0] with stdout on a pipe (out_fd) unless log takes it too;
 * stderr goes to the file log (created or truncated) when log is not NULL,
 * else it is inherited. The child dies with its parent. 0, or -1 (errno). */
static inline int test_proc_start_log(test_proc_t *p, char *const argv[], const char *log,
                                      int pipe_stdout)
{
    int fds[2] = {-1, -1};
    if (pipe_stdout && pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    fflush(stdout); /* the child must not print our buffered output again */
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* die with the test, so a crashed test leaves no server behind */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int lfd = log != NULL ? open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
        if (lfd >= 0)
            dup2(lfd, 2);
        if (pipe_stdout)
            dup2(fds[1], 1);
        else if (lfd >= 0)
            dup2(lfd, 1);
        /* storage nodes started by tests take a free HTTP port (not 9300:
         * tests of several engineers share the host); a --set wins */
        if (strstr(argv[0], "mooncake-store-server") != NULL)
            setenv("MC_STORE_HTTP_PORT", "0", 0);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pipe_stdout)
        close(fds[1]);
    p->pid = pid;
    p->out_fd = fds[0];
    return 0;
}

/* Start argv[0] with stdout on a pipe; stderr is inherited. */
static inline int test_proc_start(test_proc_t *p, char *const argv[])
{
    return test_proc_start_log(p, argv, NULL, 1);
}

/* Read one line of the child's stdout within timeout_ms. 0 on success. */
static inline int test_proc_readline(test_proc_t *p, char *line, size_t len, int timeout_ms)
{
    size_t n = 0;
    while (n + 1 < len) {
        struct pollfd pfd = {.fd = p->out_fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_ms) <= 0)
            return -1;
        char ch;
        if (read(p->out_fd, &ch, 1) != 1)
            return -1;
        if (ch == '\n')
            break;
        line[n++] = ch;
    }
    line[n] = '\0';
    return 0;
}

/* Wait for a line starting with prefix and parse the unsigned after it. */
static inline long test_proc_expect_num(test_proc_t *p, const char *prefix, int timeout_ms)
{
    char line[256];
    while (test_proc_readline(p, line, sizeof(line), timeout_ms) == 0) {
        size_t pl = strlen(prefix);
        if (strncmp(line, prefix, pl) == 0)
            return strtol(line + pl, NULL, 10);
    }
    return -1;
}

/* Send sig and reap; returns the wait status, or -1 after timeout_ms (then
 * the child is SIGKILLed and reaped). */
static inline int test_proc_stop(test_proc_t *p, int sig, int timeout_ms)
{
    int status = -1;
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        pid_t w = waitpid(p->pid, &status, WNOHANG);
        if (w == p->pid)
            goto done;
        usleep(10000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &status, 0);
    status = -1;
done:
    if (p->out_fd >= 0)
        close(p->out_fd);
    p->out_fd = -1;
    p->pid = 0;
    return status;
}

/* A TCP port on 127.0.0.1 that was free a moment ago (0 on failure). Another
 * process may take it before it is used: callers retry a start that fails. */
static inline unsigned test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    unsigned port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* 1 when something accepts connections on 127.0.0.1:port. */
static inline int test_port_open(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* SIGSTOP pid and wait until every thread of it has stopped: kill() returns
 * before a thread running on another CPU stops, and such a thread may still
 * answer requests. 0 once stopped, -1 after 2 s. */
static inline int test_proc_freeze(pid_t pid)
{
    char dir[64], path[128], buf[256];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    kill(pid, SIGSTOP);
    for (int waited = 0; waited < 2000; waited++) {
        int running = 0;
        DIR *d = opendir(dir);
        if (d == NULL)
            return -1;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%.32s/stat", dir, de->d_name);
            FILE *f = fopen(path, "r");
            if (f == NULL)
                continue;
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            buf[n] = '\0';
            const char *p = strrchr(buf, ')'); /* "tid (comm) S ..." */
            if (p != NULL && p[1] == ' ' && p[2] != 'T' && p[2] != 't')
                running++;
        }
        closedir(d);
        if (running == 0)
            return 0;
        usleep(1000);
    }
    return -1;
}

#endif /* MC_TEST_PROC_H */
