/*
 * Unit tests of the safetensors reader: valid single and sharded files,
 * and each malformed header rejected with a message naming the tensor.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "model/vlm_safetensors.h"


static char  tmpdir[64];


static int
setup(void **state)
{
    strcpy(tmpdir, "/tmp/vlm-st-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}


static int
teardown(void **state)
{
    char  cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd);
}


/* writes a safetensors file: header (padded to 8 bytes) then n data bytes */
static void
write_st(const char *name, const char *header, size_t n, size_t cut)
{
    char      path[256];
    size_t    hlen, i;
    uint8_t   len[8];
    uint64_t  h;
    FILE     *f;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    f = fopen(path, "wb");
    assert_non_null(f);

    hlen = (strlen(header) + 7) & ~(size_t) 7;
    h = hlen;
    for (i = 0; i < 8; i++) {
        len[i] = (uint8_t) (h >> (8 * i));
    }

    fwrite(len, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (i = strlen(header); i < hlen; i++) {
        fputc(' ', f);
    }

    /* data: byte i holds i % 251, float 1.0f at offset 0 */
    for (i = 0; i < n; i++) {
        fputc(i < 4 ? "\x00\x00\x80\x3f"[i] : (int) (i % 251), f);
    }

    fclose(f);

    if (cut != 0) {
        assert_int_equal(truncate(path, (off_t) cut), 0);
    }
}


static vlm_status_t
open_st(const char *name, vlm_safetensors_t **st, vlm_error_t *err)
{
    char  path[256];

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    vlm_error_clear(err);

    return vlm_safetensors_open(st, path, err);
}


static void
expect_error(const char *header, size_t n, vlm_status_t status,
    const char *needle)
{
    vlm_error_t         err;
    vlm_safetensors_t  *st;

    write_st("bad.safetensors", header, n, 0);
    assert_int_equal(open_st("bad.safetensors", &st, &err), status);
    assert_null(st);

    if (strstr(err.msg, needle) == NULL) {
        fail_msg("message \"%s\" does not name \"%s\"", err.msg, needle);
    }
}


static void
test_valid_single_file(void **state)
{
    vlm_error_t             err;
    vlm_safetensors_t      *st;
    const vlm_st_tensor_t  *t;

    /* keys listed out of offset order: JSON objects are unordered */
    write_st("ok.safetensors",
             "{\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],"
             "\"data_offsets\":[8,20]},"
             "\"__metadata__\":{\"format\":\"pt\"},"
             "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}", 20, 0);

    assert_int_equal(open_st("ok.safetensors", &st, &err), VLM_OK);
    assert_int_equal(vlm_safetensors_count(st), 2);
    assert_int_equal(vlm_safetensors_bytes(st), 20);

    t = vlm_safetensors_find(st, "a.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, VLM_DTYPE_F32);
    assert_int_equal(t->n_elements, 2);
    assert_true(((const float *) t->data)[0] == 1.0f);

    t = vlm_safetensors_find(st, "b.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, VLM_DTYPE_BF16);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(((const uint8_t *) t->data)[0], 8);

    assert_null(vlm_safetensors_find(st, "c.weight"));

    vlm_safetensors_close(st);
}


static void
test_truncated_file(void **state)
{
    vlm_error_t         err;
    vlm_safetensors_t  *st;

    write_st("cut.safetensors", "{}", 0, 5);
    assert_int_equal(open_st("cut.safetensors", &st, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "truncated"));

    /* the header says more bytes than the file holds */
    write_st("cut.safetensors",
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],"
             "\"data_offsets\":[0,16]}}", 16, 20);
    assert_int_equal(open_st("cut.safetensors", &st, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "header length"));

    /* the data is shorter than the tensor */
    write_st("cut.safetensors",
             "{\"layer.w\":{\"dtype\":\"F32\",\"shape\":[4],"
             "\"data_offsets\":[0,16]}}", 12, 0);
    assert_int_equal(open_st("cut.safetensors", &st, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"layer.w\""));
}


static void
test_out_of_range_offsets(void **state)
{
    expect_error("{\"x.bias\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[8,16]}}", 8, VLM_ERR_FORMAT,
                 "\"x.bias\"");
    expect_error("{\"x.bias\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[8,0]}}", 16, VLM_ERR_FORMAT,
                 "\"x.bias\"");
    expect_error("{\"x.bias\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[-8,0]}}", 16, VLM_ERR_FORMAT,
                 "\"x.bias\"");
}


static void
test_overlapping_data(void **state)
{
    expect_error("{\"p\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[0,8]},"
                 "\"q\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[4,12]}}", 16, VLM_ERR_FORMAT,
                 "overlaps");
}


static void
test_wrong_dtype(void **state)
{
    expect_error("{\"pos.ids\":{\"dtype\":\"F64\",\"shape\":[1],"
                 "\"data_offsets\":[0,8]}}", 8, VLM_ERR_UNSUPPORTED,
                 "\"pos.ids\"");
    expect_error("{\"pos.ids\":{\"dtype\":7,\"shape\":[1],"
                 "\"data_offsets\":[0,8]}}", 8, VLM_ERR_FORMAT,
                 "\"pos.ids\"");
}


static void
test_shape_mismatch(void **state)
{
    expect_error("{\"mlp.w\":{\"dtype\":\"F16\",\"shape\":[3,3],"
                 "\"data_offsets\":[0,16]}}", 16, VLM_ERR_FORMAT,
                 "\"mlp.w\"");
    expect_error("{\"mlp.w\":{\"dtype\":\"F32\",\"shape\":[2,-2],"
                 "\"data_offsets\":[0,16]}}", 16, VLM_ERR_FORMAT,
                 "\"mlp.w\"");
    expect_error("{\"mlp.w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                 "\"data_offsets\":[0,4]}}", 16, VLM_ERR_UNSUPPORTED,
                 "\"mlp.w\"");
}


static void
test_misaligned_data(void **state)
{
    expect_error("{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],"
                 "\"data_offsets\":[0,2]},"
                 "\"odd\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[2,6]}}", 8, VLM_ERR_UNSUPPORTED,
                 "\"odd\"");
}


static void
test_bad_json_header(void **state)
{
    expect_error("{\"w\":{\"dtype\":\"F32\",", 8, VLM_ERR_FORMAT,
                 "bad JSON header");
    expect_error("[1,2]", 8, VLM_ERR_FORMAT, "bad JSON header");
    expect_error("{\"w\":[0]}", 8, VLM_ERR_FORMAT, "\"w\"");
}


static void
write_text(const char *name, const char *text)
{
    char   path[256];
    FILE  *f;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}


static void
test_sharded(void **state)
{
    vlm_error_t             err;
    vlm_safetensors_t      *st;
    const vlm_st_tensor_t  *t;

    write_st("model-00001-of-00002.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}", 8, 0);
    write_st("model-00002-of-00002.safetensors",
             "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[0,4]},"
             "\"c\":{\"dtype\":\"BF16\",\"shape\":[2],"
             "\"data_offsets\":[4,8]}}", 8, 0);
    write_text("model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":16},\"weight_map\":{"
               "\"a\":\"model-00001-of-00002.safetensors\","
               "\"b\":\"model-00002-of-00002.safetensors\","
               "\"c\":\"model-00002-of-00002.safetensors\"}}");

    vlm_error_clear(&err);
    assert_int_equal(vlm_safetensors_open(&st, tmpdir, &err), VLM_OK);
    assert_int_equal(vlm_safetensors_shards(st), 2);
    assert_int_equal(vlm_safetensors_count(st), 3);

    t = vlm_safetensors_find(st, "b");
    assert_non_null(t);
    assert_int_equal(t->shard, 1);
    assert_true(((const float *) t->data)[0] == 1.0f);
    assert_non_null(vlm_safetensors_find(st, "a"));
    assert_non_null(vlm_safetensors_find(st, "c"));

    vlm_safetensors_close(st);

    /* the index names the wrong shard for "c" */
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{"
               "\"a\":\"model-00001-of-00002.safetensors\","
               "\"b\":\"model-00002-of-00002.safetensors\","
               "\"c\":\"model-00001-of-00002.safetensors\"}}");
    assert_int_equal(vlm_safetensors_open(&st, tmpdir, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"c\""));

    /* a tensor of a shard is missing from the index */
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{"
               "\"a\":\"model-00001-of-00002.safetensors\","
               "\"b\":\"model-00002-of-00002.safetensors\"}}");
    assert_int_equal(vlm_safetensors_open(&st, tmpdir, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"c\""));

    /* a shard file that does not exist */
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"model-00003-of-00002.safetensors\""
               "}}");
    assert_int_equal(vlm_safetensors_open(&st, tmpdir, &err), VLM_ERR_IO);

    /* a shard name that leaves the directory */
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"../etc/passwd\"}}");
    assert_int_equal(vlm_safetensors_open(&st, tmpdir, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"a\""));

    write_text("model.safetensors.index.json", "{\"weight_map\":");
    assert_int_equal(vlm_safetensors_open(&st, tmpdir, &err),
                     VLM_ERR_FORMAT);

}


static void
test_missing_file(void **state)
{
    vlm_error_t         err;
    vlm_safetensors_t  *st;

    assert_int_equal(open_st("nothing.safetensors", &st, &err), VLM_ERR_IO);
    assert_non_null(strstr(err.msg, "nothing.safetensors"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_valid_single_file),
        cmocka_unit_test(test_truncated_file),
        cmocka_unit_test(test_out_of_range_offsets),
        cmocka_unit_test(test_overlapping_data),
        cmocka_unit_test(test_wrong_dtype),
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_misaligned_data),
        cmocka_unit_test(test_bad_json_header),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_missing_file),
    };

    return cmocka_run_group_tests_name("safetensors", tests, setup,
                                       teardown);
}
