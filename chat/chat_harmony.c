/* Harmony prompt rendering for GPT-OSS. The layout is the one of OpenAI's
 * harmony format guide and renderer (docs/CHAT_FORMATS.md spells it out):
 *
 *   <|start|>system<|message|>{identity}\nKnowledge cutoff: ..\nCurrent date: ..
 *       \n\nReasoning: {effort}\n\n# Valid channels: analysis, commentary, final.
 *       Channel must be included for every message.[\nCalls to these tools must
 *       go to the commentary channel: 'functions'.]<|end|>
 *   <|start|>developer<|message|># Instructions\n\n{system+developer text}
 *       \n\n# Tools\n\n## functions\n\nnamespace functions {...}<|end|>
 *   <|start|>user<|message|>..<|end|>
 *   <|start|>assistant<|channel|>analysis<|message|>{reasoning}<|end|>
 *   <|start|>assistant<|channel|>final<|message|>{content}<|end|>
 *   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}<|call|>
 *   <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>{result}<|end|>
 *   <|start|>assistant
 *
 * Message text is caller data: it never turns into special tokens. */
#include <string.h>
#include "chat/chat_harmony.h"
#include "chat/chat_builder.h"
#include "chat/chat_json.h"
#include "tokenizer/tokenizer_internal.h"
#include "common/status.h"

#define DEFAULT_IDENTITY "You are ChatGPT, a large language model trained by OpenAI."
#define DEFAULT_CUTOFF "2024-06"

static int has_text(const char *s)
{
    return s && s[0];
}

static void render_system(chat_builder *b, const chat_render_opts *o, const char *effort,
                          int has_tools)
{
    const char *identity = o->model_identity ? o->model_identity : DEFAULT_IDENTITY;
    const char *cutoff = o->knowledge_cutoff ? o->knowledge_cutoff : DEFAULT_CUTOFF;
    cb_text(b, "<|start|>system<|message|>");
    int top = 0;
    if (has_text(identity)) {
        cb_data(b, identity);
        top = 1;
    }
    if (has_text(cutoff)) {
        cb_text(b, top ? "\nKnowledge cutoff: " : "Knowledge cutoff: ");
        cb_data(b, cutoff);
        top = 1;
    }
    if (has_text(o->current_date)) {
        cb_text(b, top ? "\nCurrent date: " : "Current date: ");
        cb_data(b, o->current_date);
        top = 1;
    }
    cb_text(b, top ? "\n\nReasoning: " : "Reasoning: ");
    cb_text(b, effort);
    cb_text(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
               "every message.");
    if (has_tools)
        cb_text(b, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    cb_text(b, "<|end|>");
}

/* One function of the `functions` namespace. */
static int render_tool(chat_builder *b, const cJSON *tool)
{
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (cJSON_IsString(desc)) {
        /* one comment line per description line (a final newline adds none) */
        const char *s = desc->valuestring;
        while (*s) {
            const char *nl = strchr(s, '\n');
            size_t n = nl ? (size_t)(nl - s) : strlen(s);
            size_t m = n;
            if (m > 0 && s[m - 1] == '\r')
                m--;
            cb_text(b, "// ");
            cb_datan(b, s, m);
            cb_text(b, "\n");
            s += n + (nl ? 1 : 0);
        }
    }
    cb_text(b, "type ");
    cb_data(b, name->valuestring);
    if (params && !cJSON_IsNull(params)) {
        sbuf ts;
        sb_init(&ts);
        int rc = harmony_schema_to_typescript(params, &ts);
        if (rc != TN_OK) {
            sb_free(&ts);
            return rc;
        }
        cb_text(b, " = (_: ");
        cb_datan(b, ts.p ? ts.p : "", ts.len);
        cb_text(b, ") => any;\n");
        sb_free(&ts);
    } else {
        cb_text(b, " = () => any;\n");
    }
    return TN_OK;
}

static int render_developer(chat_builder *b, const chat_conversation *c, int has_tools)
{
    int has_instructions = 0;
    for (size_t i = 0; i < c->n_messages; i++) {
        const chat_message *m = &c->messages[i];
        if ((m->role == CHAT_ROLE_SYSTEM || m->role == CHAT_ROLE_DEVELOPER) && has_text(m->content))
            has_instructions = 1;
    }
    if (!has_instructions && !has_tools)
        return TN_OK;
    cb_text(b, "<|start|>developer<|message|>");
    if (has_instructions) {
        cb_text(b, "# Instructions\n\n");
        int first = 1;
        for (size_t i = 0; i < c->n_messages; i++) {
            const chat_message *m = &c->messages[i];
            if ((m->role != CHAT_ROLE_SYSTEM && m->role != CHAT_ROLE_DEVELOPER) ||
                !has_text(m->content))
                continue;
            if (!first)
                cb_text(b, "\n\n");
            cb_data(b, m->content);
            first = 0;
        }
    }
    if (has_tools) {
        cb_text(b, has_instructions ? "\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
                                    : "# Tools\n\n## functions\n\nnamespace functions {\n\n");
        for (const cJSON *t = c->tools->child; t; t = t->next) {
            int rc = render_tool(b, t);
            if (rc != TN_OK)
                return rc;
            cb_text(b, "\n");
        }
        cb_text(b, "} // namespace functions");
    }
    cb_text(b, "<|end|>");
    return TN_OK;
}

/* The function a tool message answers: its own name, else the name of
 * the earlier tool call with the same id. */
static const char *tool_result_name(const chat_conversation *c, size_t idx)
{
    const chat_message *m = &c->messages[idx];
    if (has_text(m->name))
        return m->name;
    if (!m->tool_call_id)
        return NULL;
    for (size_t i = idx; i-- > 0;) {
        const chat_message *a = &c->messages[i];
        for (size_t k = 0; k < a->n_tool_calls; k++)
            if (a->tool_calls[k].id && strcmp(a->tool_calls[k].id, m->tool_call_id) == 0)
                return a->tool_calls[k].name;
    }
    return NULL;
}

int harmony_render(const bpe_tokenizer *t, const chat_conversation *c, const chat_render_opts *o,
                   tok_ids *ids, sbuf *text, char *err, size_t errlen)
{
    const char *effort = o->reasoning_effort ? o->reasoning_effort : "medium";
    if (strcmp(effort, "low") != 0 && strcmp(effort, "medium") != 0 && strcmp(effort, "high") != 0) {
        tn_errf(err, errlen, "reasoning_effort must be low, medium or high (got '%.20s')", effort);
        return TN_ERR_ARG;
    }
    int has_tools = c->tools && cJSON_GetArraySize(c->tools) > 0;
    /* Reasoning of turns that already ended in a final answer is dropped;
     * reasoning after the last final answer (a tool-calling turn still in
     * progress) is kept, as the harmony guide prescribes. */
    size_t last_final = 0;
    int any_final = 0;
    for (size_t i = 0; i < c->n_messages; i++)
        if (c->messages[i].role == CHAT_ROLE_ASSISTANT && c->messages[i].n_tool_calls == 0) {
            last_final = i;
            any_final = 1;
        }

    chat_builder b;
    cb_init(&b, 1);
    if (o->system_message)
        render_system(&b, o, effort, has_tools);
    int rc = render_developer(&b, c, has_tools);
    for (size_t i = 0; i < c->n_messages && rc == TN_OK; i++) {
        const chat_message *m = &c->messages[i];
        switch (m->role) {
        case CHAT_ROLE_SYSTEM:
        case CHAT_ROLE_DEVELOPER:
            break; /* rendered as developer instructions */
        case CHAT_ROLE_USER:
            cb_text(&b, "<|start|>user<|message|>");
            cb_data(&b, m->content);
            cb_text(&b, "<|end|>");
            break;
        case CHAT_ROLE_ASSISTANT:
            if (has_text(m->reasoning) && !(any_final && i <= last_final)) {
                cb_text(&b, "<|start|>assistant<|channel|>analysis<|message|>");
                cb_data(&b, m->reasoning);
                cb_text(&b, "<|end|>");
            }
            if (m->n_tool_calls == 0) {
                cb_text(&b, "<|start|>assistant<|channel|>final<|message|>");
                cb_data(&b, m->content);
                cb_text(&b, "<|end|>");
                break;
            }
            if (has_text(m->content)) { /* a preamble before the calls */
                cb_text(&b, "<|start|>assistant<|channel|>commentary<|message|>");
                cb_data(&b, m->content);
                cb_text(&b, "<|end|>");
            }
            for (size_t k = 0; k < m->n_tool_calls; k++) {
                cb_text(&b, "<|start|>assistant<|channel|>commentary to=functions.");
                cb_data(&b, m->tool_calls[k].name);
                cb_text(&b, " <|constrain|>json<|message|>");
                cb_data(&b, m->tool_calls[k].arguments);
                cb_text(&b, "<|call|>");
            }
            break;
        case CHAT_ROLE_TOOL: {
            const char *name = tool_result_name(c, i);
            if (!name) {
                tn_errf(err, errlen,
                         "messages[%zu]: tool message without a name or a tool_call_id of an "
                         "earlier tool call",
                         i);
                rc = TN_ERR_ARG;
                break;
            }
            cb_text(&b, "<|start|>functions.");
            cb_data(&b, name);
            cb_text(&b, " to=assistant<|channel|>commentary<|message|>");
            cb_data(&b, m->content);
            cb_text(&b, "<|end|>");
            break;
        }
        }
    }
    if (rc == TN_OK && o->add_generation_prompt)
        cb_text(&b, "<|start|>assistant");
    if (rc == TN_OK)
        rc = cb_finish(&b, t, ids, text, err, errlen);
    else if (rc == TN_ERR_NOMEM)
        tn_errf(err, errlen, "chat render: out of memory");
    cb_free(&b);
    return rc;
}
