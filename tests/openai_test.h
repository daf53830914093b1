/*
 * What the unit tests of vlm_openai share: an output parsed back with
 * jansson, or the test fails.  Included after <cmocka.h>.
 */

#ifndef OPENAI_TEST_H
#define OPENAI_TEST_H

#include <stddef.h>

#include <jansson.h>


static inline json_t *
load(const char *buf, size_t len)
{
    json_t        *j;
    json_error_t   jerr;

    j = json_loadb(buf, len, 0, &jerr);
    if (j == NULL) {
        fail_msg("output is not JSON (%s): %.*s", jerr.text, (int) len, buf);
    }

    return j;
}


#endif /* OPENAI_TEST_H */
