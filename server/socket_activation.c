/* The listening socket systemd passes (sd_listen_fds protocol). */
#include "socket_activation.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define LISTEN_FDS_START 3 /* SD_LISTEN_FDS_START */

static void unset_env(void) {
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* A non-negative decimal number, or -1. */
static long parse_count(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return (errno || end == s || *end || v < 0) ? -1 : v;
}

/* "http://ADDR:PORT", "http://[ADDR6]:PORT", "unix:PATH" or "unix:@NAME" (abstract). */
static void describe(int fd, char *desc, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(desc, cap, "fd %d", fd);
        return;
    }
    if (ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *su = (const struct sockaddr_un *)&ss;
        size_t n = sl > offsetof(struct sockaddr_un, sun_path) ? sl - offsetof(struct sockaddr_un, sun_path) : 0;
        if (n > 0 && su->sun_path[0] == 0) snprintf(desc, cap, "unix:@%.*s", (int)(n - 1), su->sun_path + 1);
        else snprintf(desc, cap, "unix:%.*s", (int)strnlen(su->sun_path, n), su->sun_path);
        return;
    }
    char hs[NI_MAXHOST] = "?", sv[NI_MAXSERV] = "?";
    getnameinfo((struct sockaddr *)&ss, sl, hs, sizeof hs, sv, sizeof sv, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(desc, cap, ss.ss_family == AF_INET6 ? "http://[%s]:%s" : "http://%s:%s", hs, sv);
}

int srv_socket_activation_take(int *fd_out, char *desc, size_t cap, latent_err *err) {
    *fd_out = -1;
    const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
    if (!pid_s || !fds_s) {
        unset_env();
        return 0;
    }
    long pid = parse_count(pid_s), n = parse_count(fds_s);
    unset_env(); /* pid_s and fds_s are not read after this */
    if (pid <= 0 || n < 0) return latent_err_set(err, LATENT_E_INVALID, "socket activation: LISTEN_PID and LISTEN_FDS must be numbers");
    if (pid != (long)getpid()) return 0; /* meant for another process */
    if (n == 0) return 0;
    if (n > 1)
        return latent_err_set(err, LATENT_E_INVALID, "socket activation: %ld sockets passed, latentd serves one "
                                   "(give latentd.socket a single ListenStream=)", n);
    int fd = LISTEN_FDS_START;
    int fdflags = fcntl(fd, F_GETFD), flflags = fcntl(fd, F_GETFL);
    if (fdflags < 0 || flflags < 0)
        return latent_err_set(err, LATENT_E_IO, "socket activation: fd %d is not open: %s", fd, strerror(errno));
    struct stat st;
    int type = 0, listening = 0;
    socklen_t len = sizeof type;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
        return latent_err_set(err, LATENT_E_INVALID, "socket activation: fd %d is not a socket", fd);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
        return latent_err_set(err, LATENT_E_INVALID, "socket activation: fd %d is not a stream socket (use ListenStream=)", fd);
    len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening)
        return latent_err_set(err, LATENT_E_INVALID, "socket activation: fd %d is not a listening socket "
                                   "(a connection: latentd needs Accept=no)", fd);
    if (fcntl(fd, F_SETFD, fdflags | FD_CLOEXEC) != 0 || fcntl(fd, F_SETFL, flflags | O_NONBLOCK) != 0)
        return latent_err_set(err, LATENT_E_IO, "socket activation: cannot set the flags of fd %d: %s", fd, strerror(errno));
    describe(fd, desc, cap);
    *fd_out = fd;
    return 1;
}
