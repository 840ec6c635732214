/*
 * wuu-confine: enter a Landlock domain of one's own, then exec the command (worker/native/confine.py).
 *
 *     wuu-confine RULESET_FD REPORT_FD N NAME=VALUE... COMMAND [ARG...]
 *
 * The worker starts this program with a vfork-like spawn instead of forking itself to run Python between
 * fork and exec. It sets no_new_privs, enforces the ruleset RULESET_FD on itself in a new domain, closes
 * that fd, and execs COMMAND with the N environment entries that follow N: the program itself runs with an
 * empty environment, so that nothing in the command's (LD_PRELOAD, say) reaches a dynamic loader before the
 * domain is entered. COMMAND is found as Python's subprocess finds it: a name with a slash as given, any
 * other in each directory of the command's PATH (/bin:/usr/bin without one), the first error other than
 * "not found" winning. Nothing runs unconfined: a failure writes one line to REPORT_FD, "landlock ERRNO" or
 * "exec ERRNO", and exits 127 without running COMMAND. REPORT_FD is close-on-exec, so the worker reads end
 * of file once COMMAND runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446 /* one number on every architecture */
#endif

static char **command_environment;

static int report_fd = -1;

static _Noreturn void fail(const char *stage, int error) {
    char line[32];
    int length = snprintf(line, sizeof line, "%s %d\n", stage, error);
    if (report_fd >= 0 && length > 0) {
        ssize_t ignored = write(report_fd, line, (size_t)length);
        (void)ignored;
    }
    _exit(127);
}

static int parse_number(const char *text) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 0 || value > INT_MAX) {
        return -1;
    }
    return (int)value;
}

static _Noreturn void execute(char **argv) {
    const char *name = argv[0];
    if (strchr(name, '/') != NULL) {
        execve(name, argv, command_environment);
        fail("exec", errno);
    }
    const char *path = "/bin:/usr/bin";
    for (char **entry = command_environment; *entry != NULL; entry++) {
        if (strncmp(*entry, "PATH=", 5) == 0) {
            path = *entry + 5;
            break;
        }
    }
    size_t name_length = strlen(name);
    int first = 0;
    int last = ENOENT;
    for (const char *start = path;; start++) {
        const char *colon = strchrnul(start, ':');
        size_t directory_length = (size_t)(colon - start);
        char candidate[PATH_MAX];
        if (directory_length + 1 + name_length < sizeof candidate) {
            /* An empty entry is the current directory, as the bare name. */
            if (directory_length == 0) {
                snprintf(candidate, sizeof candidate, "%s", name);
            } else {
                snprintf(candidate, sizeof candidate, "%.*s/%s", (int)directory_length, start, name);
            }
            execve(candidate, argv, command_environment);
            last = errno;
        } else {
            last = ENAMETOOLONG; /* what execve says of a path this long */
        }
        if (first == 0 && last != ENOENT && last != ENOTDIR) {
            first = last;
        }
        if (*colon == '\0') {
            break;
        }
        start = colon;
    }
    fail("exec", first != 0 ? first : last);
}

int main(int argc, char **argv) {
    int count = argc >= 4 ? parse_number(argv[3]) : -1;
    if (count < 0 || count > argc - 5) {
        fputs("usage: wuu-confine RULESET_FD REPORT_FD N NAME=VALUE... COMMAND [ARG...]\n", stderr);
        return 2;
    }
    int ruleset_fd = parse_number(argv[1]);
    report_fd = parse_number(argv[2]);
    if (report_fd < 0 || fcntl(report_fd, F_SETFD, FD_CLOEXEC) != 0) {
        report_fd = -1;
        fputs("wuu-confine: REPORT_FD is not an open file descriptor\n", stderr);
        return 2;
    }
    /* The entries get an array of their own, ended by NULL as execve needs; the command is the rest of argv. */
    char **entries = argv + 4;
    char **command = entries + count;
    command_environment = calloc((size_t)count + 1, sizeof *command_environment);
    if (command_environment == NULL) {
        fail("exec", ENOMEM);
    }
    memcpy(command_environment, entries, (size_t)count * sizeof *entries);
    if (ruleset_fd < 0) {
        fail("landlock", EBADF);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        fail("landlock", errno);
    }
    if (syscall(SYS_landlock_restrict_self, ruleset_fd, 0) != 0) {
        fail("landlock", errno);
    }
    close(ruleset_fd);
    execute(command);
}
