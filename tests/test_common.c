/*
 * Unit tests of vlm_common: error records and status names.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/vlm_common.h"


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


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_error_set_formats_and_returns_status),
        cmocka_unit_test(test_error_message_is_truncated_not_overflowed),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_log_respects_level),
    };

    return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}
