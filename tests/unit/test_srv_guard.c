/* The HTTP guard's decisions (server/http_guard.c), on a clock the test
 * sets: header deadlines (fresh and kept-alive), stalled and slow bodies,
 * stalled streams, eviction order at max-connections, and the body budget. */
#include "../../server/http_guard.h"

#include <string.h>

#include "testutil.h"

static const srv_guard_limits LIM = {.max_connections = 3, .timeout_s = 60, .header_timeout_s = 10, .body_timeout_s = 5,
                                     .min_body_rate = 1000, .max_body_buffer = 10000, .stream_stall_s = 30};

static void test_header_deadline(void) {
    srv_guard g;
    srv_guard_init(&g, &LIM);
    srv_guard_conn a;
    CHECK(srv_guard_opened(&g, &a, 100) == NULL, "one connection is under the limit");
    CHECK(srv_guard_due(&g, &a, 109.9) == NULL, "a header may take 10 s");
    CHECK(srv_guard_due(&g, &a, 110.1) != NULL, "...and not more, however it drips");
    CHECK(g.stats.header_timeouts == 1, "counted: %llu", g.stats.header_timeouts);
    /* A kept-alive connection gets its idle time first. */
    srv_guard_began(&g, &a, 0, 101);
    srv_guard_complete(&a, 101);
    CHECK(srv_guard_due(&g, &a, 500) == NULL, "a busy request has no header deadline");
    srv_guard_ended(&g, &a, 200);
    CHECK(srv_guard_due(&g, &a, 269) == NULL, "kept alive: idle 60 s + header 10 s allowed");
    CHECK(srv_guard_due(&g, &a, 271) != NULL, "...then closed");
    srv_guard_closed(&g, &a);
    CHECK(g.n_open == 0 && g.head == NULL && g.tail == NULL, "the list is empty again");
}

static void test_body_deadlines(void) {
    srv_guard g;
    srv_guard_init(&g, &LIM);
    srv_guard_conn a;
    srv_guard_opened(&g, &a, 0);
    CHECK(srv_guard_began(&g, &a, 5000, 0) == 0, "5000 bytes fit the 10000-byte budget");
    srv_guard_body_stored(&g, &a, 0, 5001, 0);
    CHECK(g.body_bytes == 5001, "charged the buffer's size: %zu", g.body_bytes);
    srv_guard_body_stored(&g, &a, 4000, 5001, 4);
    CHECK(srv_guard_due(&g, &a, 8.5) == NULL, "4000 bytes in 8.5 s: 1000 B/s owed after 5 s, not stalled");
    CHECK(srv_guard_due(&g, &a, 9.5) != NULL, "stalled: nothing for more than 5 s");
    CHECK(g.stats.body_timeouts == 1, "counted");
    srv_guard_closed(&g, &a);
    CHECK(g.body_bytes == 0, "closing gives the budget back: %zu", g.body_bytes);

    srv_guard_conn b;
    srv_guard_opened(&g, &b, 0);
    srv_guard_began(&g, &b, 0, 0);
    for (int t = 1; t <= 20; t++) srv_guard_body_stored(&g, &b, (size_t)t * 500, (size_t)t * 512, t);
    CHECK(srv_guard_due(&g, &b, 20) != NULL, "500 B/s against a minimum of 1000 B/s: too slow (%zu bytes in 20 s)", b.body_len);
    srv_guard_closed(&g, &b);
}

static void test_budget(void) {
    srv_guard g;
    srv_guard_init(&g, &LIM);
    srv_guard_conn a, b;
    srv_guard_opened(&g, &a, 0), srv_guard_opened(&g, &b, 0);
    CHECK(srv_guard_began(&g, &a, 8000, 0) == 0, "8000 fits");
    srv_guard_body_stored(&g, &a, 0, 8001, 0);
    CHECK(srv_guard_began(&g, &b, 3000, 0) != 0, "a second 3000 does not: 503");
    CHECK(g.stats.body_refusals == 1, "counted");
    srv_guard_body_released(&g, &a);
    CHECK(g.body_bytes == 0, "released");
    /* chunked: charged as it grows */
    srv_guard_began(&g, &b, 0, 0);
    CHECK(srv_guard_body_fits(&g, &b, 9000), "9000 chunked bytes fit");
    srv_guard_body_stored(&g, &b, 9000, 9001, 0);
    CHECK(!srv_guard_body_fits(&g, &b, 2000), "2000 more do not");
    srv_guard_ended(&g, &b, 1);
    CHECK(g.body_bytes == 0, "an ended request gives its body back");
    srv_guard_closed(&g, &a), srv_guard_closed(&g, &b);
}

static void test_stream_stall(void) {
    srv_guard g;
    srv_guard_init(&g, &LIM);
    srv_guard_conn a;
    srv_guard_opened(&g, &a, 0);
    srv_guard_began(&g, &a, 0, 0);
    srv_guard_complete(&a, 0);
    srv_guard_stream(&a, 100, 0, 1);
    CHECK(srv_guard_due(&g, &a, 30) == NULL, "nothing taken for 29 s: still allowed");
    srv_guard_stream(&a, 0, 1, 30);
    CHECK(srv_guard_due(&g, &a, 100) == NULL, "nothing left to send is no stall");
    srv_guard_stream(&a, 500, 0, 40); /* new bytes written, none taken since 30 */
    CHECK(srv_guard_due(&g, &a, 50) == NULL && srv_guard_due(&g, &a, 59.9) == NULL, "taken at 30: due after 60");
    CHECK(srv_guard_due(&g, &a, 60.5) != NULL, "stalled: bytes waiting, none taken for 30 s");
    CHECK(g.stats.stream_stalls == 1, "counted");
    srv_guard_closed(&g, &a);
}

static void test_eviction(void) {
    srv_guard g;
    srv_guard_init(&g, &LIM);
    srv_guard_conn c[6];
    srv_guard_opened(&g, &c[0], 0);
    srv_guard_began(&g, &c[0], 0, 0), srv_guard_complete(&c[0], 0); /* busy: never evicted */
    srv_guard_opened(&g, &c[1], 1);
    srv_guard_opened(&g, &c[2], 2);
    srv_guard_conn *v = srv_guard_opened(&g, &c[3], 3);
    CHECK(v == &c[1], "over the limit: the oldest incomplete request goes (got %d)", v ? (int)(v - c) : -1);
    srv_guard_closing(&g, v);
    CHECK(srv_guard_due(&g, v, 1000) == NULL, "a closing connection is not due twice");
    v = srv_guard_opened(&g, &c[4], 4);
    CHECK(v == &c[2], "then the next oldest (got %d)", v ? (int)(v - c) : -1);
    srv_guard_closing(&g, v);
    srv_guard_began(&g, &c[3], 0, 5), srv_guard_complete(&c[3], 5);
    srv_guard_began(&g, &c[4], 0, 5), srv_guard_complete(&c[4], 5);
    v = srv_guard_opened(&g, &c[5], 6);
    CHECK(v == &c[5], "every other connection busy: the new one is refused (got %d)", v ? (int)(v - c) : -1);
    CHECK(g.stats.evictions == 3, "counted: %llu", g.stats.evictions);
    for (int i = 0; i < 6; i++) srv_guard_closed(&g, &c[i]);
    CHECK(g.n_open == 0 && g.n_closing == 0, "all closed: %d open, %d closing", g.n_open, g.n_closing);
}

int main(void) {
    test_header_deadline();
    test_body_deadlines();
    test_budget();
    test_stream_stall();
    test_eviction();
    return tu_finish("test_srv_guard");
}
