/* systemd socket activation without libsystemd (the sd_listen_fds(3)
 * protocol): a listening socket handed over as fd 3, announced by
 * $LISTEN_PID (our pid: the variables are meant for this process) and
 * $LISTEN_FDS (how many, from fd 3 on). systemd passes it from
 * latentd.socket; `systemd-socket-activate -l ADDR latentd ...` does the same
 * from a shell. */
#ifndef SRV_SOCKET_ACTIVATION_H
#define SRV_SOCKET_ACTIVATION_H

#include <stddef.h>

#include "latent/error.h"

/* Takes the passed socket: 1 when there is one (*fd = 3, now non-blocking
 * and close-on-exec, and `desc` gets its address, e.g. "http://127.0.0.1:8080"
 * or "unix:/run/latentd/latentd.sock"), 0 when nothing was passed to this
 * process, -1 with `err` set when what was passed cannot be served (not a
 * listening stream socket, or more than one). Unsets LISTEN_PID, LISTEN_FDS
 * and LISTEN_FDNAMES in every case, so nothing we start inherits them. */
int srv_socket_activation_take(int *fd, char *desc, size_t cap, latent_err *err);

#endif
