/* The systemd notification protocol without libsystemd: datagrams such as
 * "READY=1" to the unix socket in $NOTIFY_SOCKET (a leading '@' names an
 * abstract socket). Without $NOTIFY_SOCKET every call does nothing. */
#ifndef SRV_SDNOTIFY_H
#define SRV_SDNOTIFY_H

#include <stdint.h>

/* Sends `state` (e.g. "READY=1\nSTATUS=serving"); 1 sent, 0 no socket, -1 error. */
int srv_sdnotify(const char *state);
/* The watchdog interval in microseconds from $WATCHDOG_USEC (when
 * $WATCHDOG_PID is unset or ours), else 0. */
uint64_t srv_sdnotify_watchdog_usec(void);

#endif
