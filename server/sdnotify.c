/* sd_notify over a datagram socket. */
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int srv_sdnotify(const char *state) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path) return -1;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@') sa.sun_path[0] = 0; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
    ssize_t r;
    do r = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    while (r < 0 && errno == EINTR);
    close(fd);
    return r < 0 ? -1 : 1;
}

uint64_t srv_sdnotify_watchdog_usec(void) {
    const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (!us) return 0;
    if (pid && strtol(pid, NULL, 10) != (long)getpid()) return 0;
    char *end;
    unsigned long long v = strtoull(us, &end, 10);
    return *end ? 0 : (uint64_t)v;
}
