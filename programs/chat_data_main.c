/* tandem-chat-data: turns training dialogues into token ids with the
 * router's own tokenizer and chat renderer, so a model trained on them sees
 * exactly the prompts the router sends (models/demo/README.md).
 *
 * Input: JSON Lines, one sample per line, either
 *   {"messages": [...], "tools": [...], "date": "YYYY-MM-DD",
 *    "completion": "<|channel|>analysis<|message|>...<|return|>"}
 * (the prompt is the conversation rendered as the router renders it, the
 * completion is what the model must write, special tokens spelled out;
 * "enable_thinking": false renders Qwen3's empty think block, as the router
 * does for chat_template_kwargs.enable_thinking false), or
 *   {"text": "plain text"}
 * (a /v1/completions-style sample: every token is a target; special-token
 * strings such as <|endoftext|> are recognised, so a sample can end in EOS).
 *
 * --out PREFIX writes PREFIX.tok (int32 little-endian ids, samples one after
 * the other) and PREFIX.idx (per sample three int64: start, prompt length,
 * total length; the loss covers positions >= prompt length). Every
 * completion is parsed back with the router's output parser and must end in
 * a stop token, so a malformed completion fails here, not in training.
 * --print-prompts prints each sample's prompt ids instead (one line each;
 * "completion" may be left out), e.g. for tests that run tandem-generate on
 * exactly the prompt the router renders. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cJSON.h>
#include "chat/chat.h"
#include "tokenizer/tokenizer.h"
#include "common/options.h"
#include "common/status.h"

#define PROG "tandem-chat-data"

typedef struct data_cli {
    char vocab[OPT_PATH_MAX], in[OPT_PATH_MAX], out[OPT_PATH_MAX];
    int print_prompts;
} data_cli;

typedef struct data_out {
    FILE *tok, *idx;
    int64_t n_tokens, n_samples, n_target;
} data_out;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tandem-chat-data --vocab PATH --in FILE.jsonl (--out PREFIX | --print-prompts)\n"
            "\n"
            "Renders training dialogues with the router's tokenizer and chat format\n"
            "(Harmony for o200k_base.tiktoken, ChatML with <think> for the Qwen3\n"
            "tokenizer.json) and writes token ids with their prompt lengths.\n"
            "\n"
            "  --vocab PATH      tokenizer.json (Qwen3) or o200k_base.tiktoken (GPT-OSS)\n"
            "  --in FILE         JSON Lines: {\"messages\",\"tools\",\"date\",\"completion\"}\n"
            "                    or {\"text\"} per line ('-' = stdin)\n"
            "  --out PREFIX      write PREFIX.tok (int32 ids) and PREFIX.idx (int64 start,\n"
            "                    prompt length, total length per sample)\n"
            "  --print-prompts   print each sample's prompt ids, comma-separated, one line\n"
            "                    per sample (what the router sends for that conversation)\n"
            "  --help            this text\n");
}

static int write_sample(data_out *o, const tok_ids *ids, size_t n_prompt, char *err,
                        size_t errlen)
{
    int64_t rec[3] = {o->n_tokens, (int64_t)n_prompt, (int64_t)ids->len};
    if (fwrite(ids->ids, sizeof(int32_t), ids->len, o->tok) != ids->len ||
        fwrite(rec, sizeof rec, 1, o->idx) != 1) {
        tn_errf(err, errlen, "write failed");
        return TN_ERR_SYS;
    }
    o->n_tokens += (int64_t)ids->len;
    o->n_samples++;
    o->n_target += (int64_t)(ids->len - (n_prompt ? n_prompt : 1));
    return TN_OK;
}

/* The completion must parse as the router would parse the model's output
 * and end with one of the format's stop tokens. */
static int check_completion(const bpe_tokenizer *t, chat_format f, const int32_t *ids, size_t n,
                            char *err, size_t errlen)
{
    chat_parser *p = NULL;
    char why[400] = "";
    int rc = chat_parse_completion(t, f, NULL, ids, n, &p, why, sizeof why);
    if (rc == TN_OK) {
        const chat_result *r = chat_parser_result(p);
        if (!r->stopped) {
            tn_errf(err, errlen, "the completion does not end with a stop token");
            rc = TN_ERR_ARG;
        } else if (r->content.len == 0 && r->n_tool_calls == 0) {
            tn_errf(err, errlen, "the completion has neither content nor a tool call");
            rc = TN_ERR_ARG;
        }
    } else {
        tn_errf(err, errlen, "the completion does not parse: %s", why);
    }
    chat_parser_free(p);
    return rc;
}

/* One JSON line: its ids into *ids, the prompt length into *n_prompt. */
static int render_sample(const bpe_tokenizer *t, const cJSON *j, int prompt_only, tok_ids *ids,
                         size_t *n_prompt, char *err, size_t errlen)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    if (cJSON_IsString(text)) {
        *n_prompt = 0;
        return bpe_encode(t, text->valuestring, strlen(text->valuestring), BPE_ENCODE_SPECIAL,
                          ids, err, errlen);
    }
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
    const cJSON *date = cJSON_GetObjectItemCaseSensitive(j, "date");
    const cJSON *completion = cJSON_GetObjectItemCaseSensitive(j, "completion");
    if (!cJSON_IsArray(messages) || !cJSON_IsString(date) ||
        (!prompt_only && !cJSON_IsString(completion))) {
        tn_errf(err, errlen, "a sample needs \"text\", or \"messages\", \"date\" and "
                "\"completion\"");
        return TN_ERR_ARG;
    }
    chat_conversation conv;
    if (chat_conversation_from_json(messages, cJSON_IsNull(tools) ? NULL : tools, &conv, err,
                                    errlen) != TN_OK)
        return TN_ERR_ARG;
    /* The router's options (router/text_codec.c): client text stays text,
     * today's date in the Harmony system message. */
    chat_render_opts o;
    chat_render_opts_default(&o);
    o.plain_content = 1;
    o.current_date = date->valuestring;
    const cJSON *thinking = cJSON_GetObjectItemCaseSensitive(j, "enable_thinking");
    if (cJSON_IsBool(thinking))
        o.enable_thinking = cJSON_IsTrue(thinking);
    chat_format f = chat_format_for(t);
    int rc = chat_render(t, f, &conv, &o, ids, NULL, err, errlen);
    chat_conversation_free(&conv);
    if (rc != TN_OK)
        return rc;
    *n_prompt = ids->len;
    if (prompt_only)
        return TN_OK;
    rc = bpe_encode(t, completion->valuestring, strlen(completion->valuestring),
                    BPE_ENCODE_SPECIAL, ids, err, errlen);
    if (rc == TN_OK)
        rc = check_completion(t, f, ids->ids + *n_prompt, ids->len - *n_prompt, err, errlen);
    return rc;
}

static int run(const data_cli *c, const bpe_tokenizer *t, data_out *o)
{
    FILE *in = strcmp(c->in, "-") ? fopen(c->in, "r") : stdin;
    if (!in) {
        fprintf(stderr, PROG ": cannot open %s\n", c->in);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int status = 0;
    tok_ids ids;
    tok_ids_init(&ids);
    while (status == 0 && (n = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if (n == 0 || line[0] == '\n')
            continue;
        char err[600] = "";
        cJSON *j = cJSON_Parse(line);
        size_t n_prompt = 0;
        ids.len = 0;
        int rc = j ? render_sample(t, j, c->print_prompts, &ids, &n_prompt, err, sizeof err) : TN_ERR_ARG;
        if (!j)
            tn_errf(err, sizeof err, "not valid JSON");
        if (rc == TN_OK && c->print_prompts) {
            for (size_t i = 0; i < n_prompt; i++)
                printf("%s%d", i ? "," : "", (int)ids.ids[i]);
            printf("\n");
        } else if (rc == TN_OK) {
            rc = write_sample(o, &ids, n_prompt, err, sizeof err);
        }
        cJSON_Delete(j);
        if (rc != TN_OK) {
            fprintf(stderr, PROG ": %s line %ld: %s\n", c->in, lineno, err);
            status = 1;
        }
    }
    if (status == 0 && ferror(in)) {
        fprintf(stderr, PROG ": reading %s failed\n", c->in);
        status = 1;
    }
    tok_ids_free(&ids);
    free(line);
    if (in != stdin)
        fclose(in);
    return status;
}

static int open_outputs(const char *prefix, data_out *o)
{
    size_t n = strlen(prefix) + 8;
    char *p = malloc(n);
    if (!p)
        return -1;
    snprintf(p, n, "%s.tok", prefix);
    o->tok = fopen(p, "wb");
    snprintf(p, n, "%s.idx", prefix);
    o->idx = fopen(p, "wb");
    free(p);
    return o->tok && o->idx ? 0 : -1;
}

static int close_outputs(data_out *o)
{
    int bad = 0;
    if (o->tok)
        bad |= fclose(o->tok) != 0;
    if (o->idx)
        bad |= fclose(o->idx) != 0;
    return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    data_cli c = {0};
    const opt_spec specs[] = {
        {"vocab", OPT_STR, c.vocab, sizeof c.vocab, "tokenizer.json or o200k_base.tiktoken"},
        {"in", OPT_STR, c.in, sizeof c.in, "JSON Lines input"},
        {"out", OPT_STR, c.out, sizeof c.out, "output prefix"},
        {"print-prompts", OPT_BOOL, &c.print_prompts, 0, "print prompt ids"},
    };
    const opts_cli cli = {specs, (int)(sizeof specs / sizeof *specs), NULL, NULL, "option"};
    char err[512];
    int rc = opts_parse_cli(&cli, argc, argv, err, sizeof err);
    if (rc == OPTS_HELP) {
        usage(stdout);
        return 0;
    }
    if (rc == OPTS_ERROR)
        return opts_usage_error(PROG, "%s", err);
    if (!c.vocab[0] || !c.in[0])
        return opts_usage_error(PROG, "--vocab and --in are required");
    if (!c.out[0] == !c.print_prompts)
        return opts_usage_error(PROG, "give exactly one of --out PREFIX and --print-prompts");
    bpe_tokenizer *t = NULL;
    if (bpe_tokenizer_load(c.vocab, &t, err, sizeof err) != TN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    data_out o = {0};
    int status = 0;
    if (c.out[0] && open_outputs(c.out, &o) != 0) {
        fprintf(stderr, PROG ": cannot create %s.tok / %s.idx\n", c.out, c.out);
        status = 1;
    }
    if (status == 0)
        status = run(&c, t, &o);
    if (close_outputs(&o) != 0 && status == 0) {
        fprintf(stderr, PROG ": writing %s failed\n", c.out);
        status = 1;
    }
    if (status == 0 && c.out[0])
        fprintf(stderr, PROG ": %lld samples, %lld tokens (%lld targets) -> %s.tok, %s.idx\n",
                (long long)o.n_samples, (long long)o.n_tokens, (long long)o.n_target, c.out,
                c.out);
    bpe_tokenizer_free(t);
    return status;
}
