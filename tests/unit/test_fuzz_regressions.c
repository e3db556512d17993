/* Regression tests for what `make fuzz` found (tests/fuzz/). Each test
 * replays the crashing input kept in tests/fuzz/corpus/TARGET/regress-* (or
 * states it inline when it is a few bytes) and asserts the fixed
 * behaviour, so the normal and ASan suites keep covering it without clang
 * or libFuzzer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/config.h"
#include "common/status.h"
#include <zmq.h>
#include "router/router.h"
#include "tokenizer/tokenizer.h"
#include "common/utf8.h"
#include "tests/unit/engine_testutil.h"

#define O200K_VOCAB "vocab/gpt-tokenizer/data/o200k_base.tiktoken"

/* fuzz tokenizer_o200k, input "\x04" (guarded encode of empty text): the
 * decode of zero tokens passed an empty buffer's NULL data on, and
 * utf8_append_lossy computed NULL + 0 (undefined behaviour; clang's UBSan
 * aborts on it). */
static void empty_decode_is_empty_text(void **state)
{
    (void)state;
    sbuf out;
    sb_init(&out);
    assert_int_equal(utf8_append_lossy(&out, NULL, 0, 1, NULL), TN_OK);
    assert_int_equal(out.len, 0);
    size_t pending = 7;
    assert_int_equal(utf8_append_lossy(&out, NULL, 0, 0, &pending), TN_OK);
    assert_int_equal(pending, 0);
    assert_int_equal(out.len, 0);

    bpe_tokenizer *t = NULL;
    char err[256];
    if (bpe_tokenizer_load(O200K_VOCAB, &t, err, sizeof(err)) != TN_OK)
        fail_msg("cannot load %s (%s); `make deps` fetches it", O200K_VOCAB, err);
    tok_ids ids;
    tok_ids_init(&ids);
    assert_int_equal(bpe_encode_guarded(t, "", 0, NULL, 0, &ids, err, sizeof(err)), TN_OK);
    assert_int_equal(ids.len, 0);
    assert_int_equal(bpe_decode(t, ids.ids, ids.len, 0, &out, err, sizeof(err)), TN_OK);
    assert_int_equal(out.len, 0);
    tok_ids_free(&ids);
    bpe_tokenizer_free(t);
    sb_free(&out);
}

/* Loads the corpus file as dir/config.json; returns tm_config_load's status. */
static int load_config_file(const char *corpus_file, tm_config *c, char *err, size_t errlen)
{
    char dir[256], path[512];
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    assert_int_equal(et_copy_file(corpus_file, et_path(path, sizeof(path), dir, "config.json")), 0);
    int rc = tm_config_load(dir, c, err, errlen);
    et_rm_rf(dir);
    return rc;
}

/* fuzz config: "rms_norm_eps": 1e300 is a positive double but infinity as
 * the float the engine keeps, so the model would have normalised by inf
 * (all-zero activations, then NaN logits). Now a clear error. */
static void config_float_fields_must_fit_float(void **state)
{
    (void)state;
    tm_config c;
    char err[256] = "";
    assert_int_equal(load_config_file("tests/fuzz/corpus/config/regress-rms-eps-overflow", &c,
                                      err, sizeof(err)),
                     TN_ERR_ARG);
    assert_non_null(strstr(err, "rms_norm_eps"));
    assert_int_equal(c.arch, 0);

    /* the same for GPT-OSS's swiglu_limit, a float clamp bound */
    char dir[256], path[512];
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    FILE *in = fopen(ET_GPT_OSS "/config.json", "rb");
    assert_non_null(in);
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, in);
    fclose(in);
    text[n] = '\0';
    char *brace = strchr(text, '{');
    assert_non_null(brace);
    char edited[8300];
    snprintf(edited, sizeof(edited), "{\"swiglu_limit\": 1e200, %s", brace + 1);
    assert_int_equal(et_write_file(et_path(path, sizeof(path), dir, "config.json"), edited,
                                   strlen(edited)),
                     0);
    err[0] = '\0';
    assert_int_equal(tm_config_load(dir, &c, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "swiglu_limit"));
    et_rm_rf(dir);
}

/* fuzz router_messages, seed cancel_prefilling: an RPC request that ends
 * before any token (cancelled while prefilling) sent its final chunk with
 * tokens = r->out + 0 where r->out is NULL (undefined behaviour). The
 * client must get one final chunk with no tokens and the finish reason. */
static void rpc_final_chunk_without_output(void **state)
{
    (void)state;
    router_ctx *ctx = calloc(1, sizeof *ctx);
    assert_non_null(ctx);
    metrics_init(&ctx->metrics);
    ctx->zctx = zmq_ctx_new();
    assert_non_null(ctx->zctx);
    ctx->rpc_sock = zmq_socket(ctx->zctx, ZMQ_ROUTER);
    void *client = zmq_socket(ctx->zctx, ZMQ_DEALER);
    assert_non_null(ctx->rpc_sock);
    assert_non_null(client);
    int one = 1, linger = 0;
    zmq_setsockopt(ctx->rpc_sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(ctx->rpc_sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(client, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(client, ZMQ_ROUTING_ID, "c0", 2);
    assert_int_equal(zmq_bind(ctx->rpc_sock, "inproc://regress-rpc"), 0);
    assert_int_equal(zmq_connect(client, "inproc://regress-rpc"), 0);
    char buf[256];
    assert_int_equal(zmq_send(client, "", 0, 0), 0); /* the router learns "c0" */
    assert_int_equal(zmq_recv(ctx->rpc_sock, buf, sizeof buf, 0), 2);
    assert_int_equal(zmq_recv(ctx->rpc_sock, buf, sizeof buf, 0), 0);

    router_request *r = request_new(ctx, ORIGIN_RPC);
    assert_non_null(r);
    memcpy(r->client_rid, "c0", 2);
    r->client_rid_len = 2;
    r->finished = 1;
    r->finish_reason = TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED;
    assert_null(r->out);
    rpc_deliver(ctx, r);
    int n = zmq_recv(client, buf, sizeof buf, ZMQ_DONTWAIT);
    assert_true(n > 0);
    Tandem__V1__ClientMessage *m = tandem__v1__client_message__unpack(NULL, (size_t)n,
                                                                       (const uint8_t *)buf);
    assert_non_null(m);
    assert_int_equal(m->body_case, TANDEM__V1__CLIENT_MESSAGE__BODY_CHUNK);
    assert_string_equal(m->chunk->request_id, r->id);
    assert_int_equal(m->chunk->n_tokens, 0);
    assert_int_equal(m->chunk->finish_reason, TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED);
    tandem__v1__client_message__free_unpacked(m, NULL);
    request_unref(r);
    zmq_close(client);
    zmq_close(ctx->rpc_sock);
    zmq_ctx_term(ctx->zctx);
    free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_decode_is_empty_text),
        cmocka_unit_test(config_float_fields_must_fit_float),
        cmocka_unit_test(rpc_final_chunk_without_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
