/* The route table (routes.c): the HTTP layer's callbacks. */
#ifndef SRV_ROUTES_H
#define SRV_ROUTES_H

#include "http.h"

/* A complete request: authentication, CORS, the handler of its route. */
void srv_routes_on_request(void *ud, srv_conn *c);
/* A request ended: its access log line and metrics. */
void srv_routes_on_close(void *ud, srv_conn *c);

#endif
