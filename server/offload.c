/* Small endpoints' work on the thread pool (offload.h). A job is in one of
 * three states: RUNNING (the pool holds it), DONE (back on the loop, the
 * reply not sent yet) and ORPHANED (the connection closed while the pool
 * held it: freed when the pool returns it). The body is taken from the
 * connection before the job is queued, since the connection may close
 * while the pool reads it. */
#include <stdlib.h>

#include "log.h"
#include "offload.h"
#include "reply.h"

typedef enum { JOB_RUNNING, JOB_DONE, JOB_ORPHANED } job_state;

typedef struct job {
    srv_ctx *x;
    srv_conn *conn;
    srv_offload_fn fn;
    job_state state;
    srv_buf body;
    json_t *result;           /* DONE: the reply, or NULL and err */
    srv_error err;
    uv_work_t work;
} job;

static void job_free(job *j) {
    srv_buf_free(&j->body);
    json_decref(j->result);
    free(j);
}

/* fn, with an error for a NULL it did not explain (jansson out of memory). */
static json_t *run_fn(srv_ctx *x, srv_offload_fn fn, const char *body, size_t len, srv_error *e) {
    json_t *r = fn(x, body, len, e);
    if (!r && e->kind == SRV_ERR_NONE) srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    return r;
}

static void job_work(uv_work_t *w) {
    job *j = w->data;
    j->result = run_fn(j->x, j->fn, j->body.p ? j->body.p : "", j->body.len, &j->err);
}

static void job_done(uv_work_t *w, int status) {
    job *j = w->data;
    if (j->state == JOB_ORPHANED) return job_free(j);
    j->state = JOB_DONE;
    srv_buf_free(&j->body);
    srv_conn_release_body(j->conn); /* its memory goes back to the body budget */
    if (status != 0 && !j->result && j->err.kind == SRV_ERR_NONE)
        srv_error_set(&j->err, SRV_ERR_INTERNAL, NULL, "the request was cancelled");
    srv_conn_wake(j->conn);
}

static void on_resume(void *ud, srv_conn *c, void *data) {
    job *j = data;
    if (j->state != JOB_DONE) return srv_conn_suspend(c);
    if (j->result) srv_reply_json(ud, c, 200, j->result); /* takes it */
    else srv_reply_error(ud, c, &j->err);
    j->result = NULL;
}

static void on_abort(void *ud, srv_conn *c, void *data) { (void)ud, (void)c, (void)data; /* on_close follows */ }

static void on_close(void *ud, srv_conn *c, void *data) {
    (void)ud, (void)c;
    job *j = data;
    if (j->state == JOB_RUNNING) { /* the pool still holds it */
        j->state = JOB_ORPHANED, j->conn = NULL;
        return;
    }
    job_free(j);
}

static const srv_conn_handler job_handler = {on_resume, on_abort, NULL, on_close};

static void run_in_place(srv_ctx *x, srv_conn *c, srv_offload_fn fn) {
    size_t len;
    const char *body = srv_conn_body(c, &len);
    srv_error e = {0};
    json_t *r = run_fn(x, fn, body, len, &e);
    srv_conn_release_body(c);
    if (r) srv_reply_json(x, c, 200, r);
    else srv_reply_error(x, c, &e);
}

void srv_offload(srv_ctx *x, srv_conn *c, srv_offload_fn fn) {
    size_t len;
    srv_conn_body(c, &len);
    job *j = len > SRV_OFFLOAD_BYTES ? calloc(1, sizeof *j) : NULL;
    if (!j) return run_in_place(x, c, fn); /* small, or no memory for a job: here */
    j->x = x, j->conn = c, j->fn = fn, j->state = JOB_RUNNING;
    srv_conn_take_body(c, &j->body);
    j->work.data = j;
    if (uv_queue_work(x->loop, &j->work, job_work, job_done) != 0) {
        srv_log(SRV_LOG_ERROR, "cannot queue a request's work on the thread pool; doing it on the loop");
        size_t n = j->body.len;
        json_t *r = run_fn(x, fn, j->body.p ? j->body.p : "", n, &j->err);
        srv_conn_release_body(c);
        if (r) srv_reply_json(x, c, 200, r);
        else srv_reply_error(x, c, &j->err);
        return job_free(j);
    }
    srv_conn_attach(c, &job_handler, j);
    srv_conn_suspend(c);
}
