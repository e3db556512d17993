/* libFuzzer target: chat_conversation_from_json on arbitrary JSON, then
 * rendering the accepted conversations in both formats.
 *
 * data[0] picks render options; the rest is JSON text: an object's
 * "messages" and "tools", or any other value as the messages. Properties:
 * from_json and chat_render either succeed or fail with TN_ERR_ARG and a
 * message; rendered ids are in the vocabulary; the Harmony prompt decodes
 * back to its rendered text exactly (o200k has no normalizer); an
 * unguarded Qwen3 prompt (plain_content 0, what HF does) has exactly the
 * ids of encoding its rendered text with special tokens recognised. */
#include <stdlib.h>
#include <string.h>
#include <cJSON.h>
#include "common/status.h"
#include "chat/chat.h"
#include "common/utf8.h"
#include "tests/fuzz/harness.h"

/* Loaded once; see harness.h. */
static bpe_tokenizer *o200k, *qwen3;
static int32_t o200k_vocab, qwen3_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    o200k = fz_load_tokenizer("o200k");
    qwen3 = fz_load_tokenizer("qwen3");
    o200k_vocab = bpe_vocab_size(o200k);
    qwen3_vocab = bpe_vocab_size(qwen3);
    return 0;
}

static int ids_equal(const tok_ids *a, const tok_ids *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->ids, b->ids, a->len * sizeof(*a->ids)) == 0);
}

static void render(const bpe_tokenizer *t, int32_t vocab, chat_format f,
                   const chat_conversation *c, const chat_render_opts *o)
{
    tok_ids ids;
    sbuf text;
    tok_ids_init(&ids);
    sb_init(&text);
    char err[256] = "";
    int rc = chat_render(t, f, c, o, &ids, &text, err, sizeof(err));
    if (rc != TN_OK) {
        FZ_CHECK(rc == TN_ERR_ARG && err[0] != '\0');
    } else {
        for (size_t i = 0; i < ids.len; i++)
            FZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < vocab);
        FZ_CHECK(utf8_valid(text.p ? text.p : "", text.len, NULL));
        if (f == CHAT_FORMAT_HARMONY) {
            sbuf back;
            sb_init(&back);
            FZ_CHECK(bpe_decode(t, ids.ids, ids.len, 0, &back, err, sizeof(err)) == TN_OK);
            FZ_CHECK(back.len == text.len &&
                     (text.len == 0 || memcmp(back.p, text.p, text.len) == 0));
            sb_free(&back);
        } else if (!o->plain_content) {
            tok_ids again;
            tok_ids_init(&again);
            FZ_CHECK(bpe_encode(t, text.p ? text.p : "", text.len, BPE_ENCODE_SPECIAL,
                                &again, err, sizeof(err)) == TN_OK);
            FZ_CHECK(ids_equal(&ids, &again));
            tok_ids_free(&again);
        }
    }
    tok_ids_free(&ids);
    sb_free(&text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t opt = data[0];
    cJSON *root = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    if (!root)
        return 0;
    const cJSON *messages = root, *tools = NULL;
    if (cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
        tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    }
    chat_conversation conv;
    char err[256] = "";
    int rc = chat_conversation_from_json(messages, tools, &conv, err, sizeof(err));
    if (rc != TN_OK) {
        FZ_CHECK(rc == TN_ERR_ARG && err[0] != '\0');
    } else {
        static const char *const efforts[] = {"low", "medium", "high", NULL};
        chat_render_opts o;
        chat_render_opts_default(&o);
        o.add_generation_prompt = opt & 1;
        o.enable_thinking = (opt >> 1) & 1;
        o.plain_content = (opt >> 2) & 1;
        o.system_message = !((opt >> 3) & 1);
        o.reasoning_effort = efforts[(opt >> 4) & 3];
        o.current_date = (opt & 0x40) ? "2025-08-05" : NULL;
        render(o200k, o200k_vocab, CHAT_FORMAT_HARMONY, &conv, &o);
        render(qwen3, qwen3_vocab, CHAT_FORMAT_QWEN3, &conv, &o);
        chat_conversation_free(&conv);
    }
    cJSON_Delete(root);
    return 0;
}
