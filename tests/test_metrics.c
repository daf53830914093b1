/*
 * Unit tests of the shared metrics: histogram buckets, pool gauges and the
 * Prometheus text rendering (cumulative buckets, buffer sizing).
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "queue/vlm_metrics.h"


static char *
render(const vlm_metrics_t *m, const vlm_queue_stats_t *q)
{
    char    *buf;
    size_t   need;

    need = vlm_metrics_render(m, q, NULL, 0);
    buf = malloc(need);
    assert_non_null(buf);
    assert_int_equal(vlm_metrics_render(m, q, buf, need), need);
    assert_int_equal(strlen(buf) + 1, need);

    return buf;
}


static void
test_histogram_is_cumulative(void **state)
{
    char               *text;
    vlm_metrics_t      *m;
    vlm_queue_stats_t   q;

    m = calloc(1, sizeof(*m));
    assert_non_null(m);
    memset(&q, 0, sizeof(q));

    vlm_hist_observe(&m->hist[VLM_HIST_TTFT], 3000000);       /* 3 ms */
    vlm_hist_observe(&m->hist[VLM_HIST_TTFT], 200000000);     /* 200 ms */
    vlm_hist_observe(&m->hist[VLM_HIST_TTFT], 1000000000000); /* 1000 s */

    text = render(m, &q);

    assert_non_null(strstr(text,
        "vlm_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
    assert_non_null(strstr(text,
        "vlm_time_to_first_token_seconds_bucket{le=\"0.1\"} 1\n"));
    assert_non_null(strstr(text,
        "vlm_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n"));
    assert_non_null(strstr(text,
        "vlm_time_to_first_token_seconds_bucket{le=\"300\"} 2\n"));
    assert_non_null(strstr(text,
        "vlm_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(text,
        "vlm_time_to_first_token_seconds_count 3\n"));
    assert_non_null(strstr(text,
        "vlm_time_to_first_token_seconds_sum 1000.203000\n"));
    assert_non_null(strstr(text,
        "# TYPE vlm_inter_token_latency_seconds histogram\n"));

    free(text);
    free(m);
}


static void
test_requests_and_pools(void **state)
{
    char               *text, small[16];
    vlm_metrics_t      *m;
    vlm_pool_gauge_t   *kv, *again;
    vlm_queue_stats_t   q;

    m = calloc(1, sizeof(*m));
    assert_non_null(m);
    memset(&q, 0, sizeof(q));
    q.slots = 64;
    q.slots_used = 3;
    q.arena_bytes = 1 << 20;
    q.engine_up = 1;

    vlm_metrics_request(m, 200);
    vlm_metrics_request(m, 200);
    vlm_metrics_request(m, 429);
    vlm_metrics_request(m, 42);         /* ignored: not an HTTP status */

    kv = vlm_metrics_pool(m, "kv_blocks", "blocks", 100);
    assert_non_null(kv);
    vlm_pool_gauge_add(kv, 30);
    vlm_pool_gauge_add(kv, -20);

    /* a restarted engine finds its row again; use restarts from zero */
    again = vlm_metrics_pool(m, "kv_blocks", "blocks", 100);
    assert_ptr_equal(again, kv);
    assert_int_equal(atomic_load(&kv->used), 0);
    assert_int_equal(atomic_load(&kv->peak), 30);

    text = render(m, &q);

    assert_non_null(strstr(text, "vlm_requests_total{status=\"200\"} 2\n"));
    assert_non_null(strstr(text, "vlm_requests_total{status=\"429\"} 1\n"));
    assert_null(strstr(text, "status=\"42\""));
    assert_non_null(strstr(text, "vlm_engine_up 1\n"));
    assert_non_null(strstr(text,
        "vlm_pool_capacity{pool=\"kv_blocks\",unit=\"blocks\"} 100\n"));
    assert_non_null(strstr(text,
        "vlm_pool_peak{pool=\"kv_blocks\",unit=\"blocks\"} 30\n"));
    assert_non_null(strstr(text,
        "vlm_pool_used{pool=\"request_slots\",unit=\"slots\"} 3\n"));

    /* too small a buffer: truncated, NUL-terminated, real length told */
    assert_int_equal(vlm_metrics_render(m, &q, small, sizeof(small)),
                     strlen(text) + 1);
    assert_int_equal(strlen(small), sizeof(small) - 1);

    free(text);
    free(m);
}


static void
test_pool_table_is_bounded(void **state)
{
    int             i;
    char            name[16];
    vlm_metrics_t  *m;

    m = calloc(1, sizeof(*m));
    assert_non_null(m);

    for (i = 0; i < VLM_METRICS_POOLS; i++) {
        snprintf(name, sizeof(name), "p%d", i);
        assert_non_null(vlm_metrics_pool(m, name, "bytes", 1));
    }

    assert_null(vlm_metrics_pool(m, "one_more", "bytes", 1));

    free(m);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_histogram_is_cumulative),
        cmocka_unit_test(test_requests_and_pools),
        cmocka_unit_test(test_pool_table_is_bounded),
    };

    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
