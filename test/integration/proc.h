/*
 * proc.h - spawn and stop helper processes in integration tests.
 * Header-only so each test stays one .c file.
 */
#ifndef MC_TEST_PROC_H
#define MC_TEST_PROC_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

/* Start argv[0] with stdout on a pipe; stderr is inherited. */
static inline int test_proc_start(test_proc_t *p, char *const argv[])
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* die with the test, so a crashed test leaves no server behind */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    p->out_fd = fds[0];
    return 0;
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
    close(p->out_fd);
    p->pid = 0;
    return status;
}

#endif /* MC_TEST_PROC_H */
