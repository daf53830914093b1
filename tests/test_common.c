/*
 * Unit tests of vlm_common: error records, status names and the memory
 * the kernels stream.
 */

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/vlm_common.h"
#include "core/vlm_dtype.h"


static void
test_error_set_formats_and_returns_status(void **state)
{
    vlm_error_t  err;

    vlm_error_clear(&err);
    assert_int_equal(vlm_error_set(&err, VLM_ERR_FORMAT, "tensor %s: %d",
                                   "w", 3), VLM_ERR_FORMAT);
    assert_int_equal(err.status, VLM_ERR_FORMAT);
    assert_string_equal(err.msg, "tensor w: 3");

    assert_int_equal(vlm_error_set(NULL, VLM_ERR_IO, "x"), VLM_ERR_IO);
}


static void
test_error_message_is_truncated_not_overflowed(void **state)
{
    char         big[VLM_ERROR_MSG_LEN * 2];
    vlm_error_t  err;

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';

    vlm_error_set(&err, VLM_ERR_INVALID, "%s", big);
    assert_int_equal(strlen(err.msg), VLM_ERROR_MSG_LEN - 1);
}


static void
test_status_names(void **state)
{
    assert_string_equal(vlm_status_str(VLM_OK), "ok");
    assert_string_equal(vlm_status_str(VLM_ERR_LIMIT), "limit exceeded");
    assert_string_equal(vlm_status_str((vlm_status_t) 999),
                        "unknown status");
}


static int          log_calls;
static char         log_last[64];


static void
log_capture(void *data, vlm_log_level_t level, const char *msg)
{
    log_calls++;
    strncpy(log_last, msg, sizeof(log_last) - 1);
}


static void
test_log_respects_level(void **state)
{
    log_calls = 0;
    vlm_log_set_handler(log_capture, NULL, VLM_LOG_WARN);

    vlm_log(VLM_LOG_ERROR, "bad %d", 1);
    vlm_log(VLM_LOG_DEBUG, "hidden");

    assert_int_equal(log_calls, 1);
    assert_string_equal(log_last, "bad 1");

    vlm_log_set_handler(NULL, NULL, VLM_LOG_INFO);
}


/*
 * the THPeligible field of the mapping in /proc/self/smaps that holds p:
 * 1 or 0, -1 where the kernel does not say
 */
static int
thp_eligible(const void *p)
{
    int                 v;
    char                line[512];
    FILE               *f;
    unsigned long long  lo, hi, a, b, at;

    f = fopen("/proc/self/smaps", "r");
    if (f == NULL) {
        return -1;
    }

    v = -1;
    lo = hi = 0;
    at = (unsigned long long) (uintptr_t) p;

    while (fgets(line, sizeof(line), f) != NULL) {
        /* a mapping's first line: its range */
        if (sscanf(line, "%llx-%llx ", &a, &b) == 2) {
            lo = a;
            hi = b;
            continue;
        }

        if (at >= lo && at < hi && sscanf(line, "THPeligible: %d", &v) == 1) {
            break;
        }
    }

    fclose(f);

    return v;
}


static void
test_huge_alloc(void **state)
{
    char     mode[128];
    size_t   size;
    FILE    *f;
    uint8_t *p;

    (void) state;

    /* small buffers: plain malloc(), 0 bytes a valid pointer */
    p = vlm_huge_alloc(0);
    assert_non_null(p);
    free(p);

    p = vlm_huge_alloc(100);
    assert_non_null(p);
    memset(p, 1, 100);
    free(p);

    /* a weight's buffer: aligned to 2 MiB, all of it usable */
    size = 5 * (size_t) VLM_HUGE_PAGE + 123;
    p = vlm_huge_alloc(size);
    assert_non_null(p);
    assert_int_equal((uintptr_t) p % VLM_HUGE_PAGE, 0);
    memset(p, 7, size);
    assert_int_equal(p[size - 1], 7);

    /* and advised into huge pages, unless the kernel has them off */
    mode[0] = '\0';
    f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f != NULL) {
        if (fgets(mode, sizeof(mode), f) == NULL) {
            mode[0] = '\0';
        }

        fclose(f);
    }

    if (mode[0] != '\0' && strstr(mode, "[never]") == NULL
        && thp_eligible(p) != -1)
    {
        assert_int_equal(thp_eligible(p), 1);
    }

    free(p);
}


/*
 * float8 e4m3fn narrowing (the CUDA backend's fp8 KV cache, which the
 * emulated device's tests hold to these bits): every code comes back as
 * itself, a value between two codes goes to the nearer and a tie to the
 * even one, past the largest (448) and infinities saturate, NaN stays
 * NaN, and the smallest subnormal's half is zero
 */
static void
test_f8e4m3_narrowing(void **state)
{
    int       c, e;
    float     a, b, m;
    uint32_t  u;

    for (c = 0; c < 256; c++) {
        a = vlm_f8e4m3_to_f32((uint8_t) c);

        if ((c & 0x7f) == 0x7f) {
            assert_true(isnan(a));
            assert_int_equal(vlm_f32_to_f8e4m3(a) & 0x7f, 0x7f);
            continue;
        }

        assert_int_equal(vlm_f32_to_f8e4m3(a), c);

        /* the next code up, in magnitude, and the values between */
        if ((c & 0x7f) == 0x7e) {
            continue;
        }

        b = vlm_f8e4m3_to_f32((uint8_t) (c + 1));
        m = (a + b) / 2;
        e = (c & 1) ? c + 1 : c;

        assert_int_equal(vlm_f32_to_f8e4m3(m), e);
        memcpy(&u, &m, sizeof(u));
        u--;
        memcpy(&m, &u, sizeof(u));
        assert_int_equal(vlm_f32_to_f8e4m3(m), c);
        m = (a + b) / 2;
        memcpy(&u, &m, sizeof(u));
        u++;
        memcpy(&m, &u, sizeof(u));
        assert_int_equal(vlm_f32_to_f8e4m3(m), c + 1);
    }

    assert_int_equal(vlm_f32_to_f8e4m3(448.0f), 0x7e);
    assert_int_equal(vlm_f32_to_f8e4m3(464.0f), 0x7e);
    assert_int_equal(vlm_f32_to_f8e4m3(1e30f), 0x7e);
    assert_int_equal(vlm_f32_to_f8e4m3(-INFINITY), 0xfe);
    assert_int_equal(vlm_f32_to_f8e4m3(NAN) & 0x7f, 0x7f);
    assert_int_equal(vlm_f32_to_f8e4m3(1.0f / 1024), 0);
    assert_int_equal(vlm_f32_to_f8e4m3(1.0f / 1000), 1);
    assert_int_equal(vlm_f32_to_f8e4m3(-0.0f), 0x80);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_error_set_formats_and_returns_status),
        cmocka_unit_test(test_error_message_is_truncated_not_overflowed),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_log_respects_level),
        cmocka_unit_test(test_huge_alloc),
        cmocka_unit_test(test_f8e4m3_narrowing),
    };

    return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}
