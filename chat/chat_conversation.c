/* OpenAI chat-completions "messages" / "tools" JSON -> chat_conversation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/chat.h"
#include "chat/chat_json.h"
#include "tokenizer/tokenizer_internal.h"
#include "common/status.h"

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static int parse_role(const char *s, chat_role *role)
{
    static const struct {
        const char *name;
        chat_role role;
    } roles[] = {{"system", CHAT_ROLE_SYSTEM}, {"developer", CHAT_ROLE_DEVELOPER},
                 {"user", CHAT_ROLE_USER},     {"assistant", CHAT_ROLE_ASSISTANT},
                 {"tool", CHAT_ROLE_TOOL}};
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
        if (strcmp(s, roles[i].name) == 0) {
            *role = roles[i].role;
            return 1;
        }
    return 0;
}

/* content: string, null, or text parts joined with "\n" (as vLLM does). */
static int parse_content(const cJSON *v, char **out, size_t idx, char *err, size_t errlen)
{
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return TN_OK;
    if (cJSON_IsString(v)) {
        *out = dup_str(v->valuestring);
        return *out ? TN_OK : TN_ERR_NOMEM;
    }
    if (!cJSON_IsArray(v)) {
        tn_errf(err, errlen, "messages[%zu].content must be a string, null or an array of parts", idx);
        return TN_ERR_ARG;
    }
    sbuf b;
    sb_init(&b);
    int k = 0, rc = TN_OK;
    for (const cJSON *part = v->child; part && rc == TN_OK; part = part->next, k++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text)) {
            tn_errf(err, errlen, "messages[%zu].content[%d]: only {\"type\": \"text\"} parts are supported",
                     idx, k);
            rc = TN_ERR_ARG;
            break;
        }
        if (k > 0)
            rc = sb_putc(&b, '\n');
        if (rc == TN_OK)
            rc = sb_puts(&b, text->valuestring);
    }
    if (rc != TN_OK) {
        sb_free(&b);
        return rc;
    }
    *out = sb_take(&b);
    return *out ? TN_OK : TN_ERR_NOMEM;
}

static int opt_string(const cJSON *obj, const char *key, char **out, size_t idx, char *err,
                      size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return TN_OK;
    if (!cJSON_IsString(v)) {
        tn_errf(err, errlen, "messages[%zu].%s must be a string", idx, key);
        return TN_ERR_ARG;
    }
    *out = dup_str(v->valuestring);
    return *out ? TN_OK : TN_ERR_NOMEM;
}

static int parse_tool_calls(const cJSON *v, chat_message *m, size_t idx, char *err, size_t errlen)
{
    if (!v || cJSON_IsNull(v))
        return TN_OK;
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v)) {
        tn_errf(err, errlen, "messages[%zu].tool_calls must be an array", idx);
        return TN_ERR_ARG;
    }
    if (n == 0)
        return TN_OK;
    m->tool_calls = calloc((size_t)n, sizeof(*m->tool_calls));
    if (!m->tool_calls)
        return TN_ERR_NOMEM;
    int k = 0;
    for (const cJSON *tc = v->child; tc; tc = tc->next, k++) {
        m->n_tool_calls++;
        chat_tool_call *c = &m->tool_calls[k];
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(tc, "id");
        if (!cJSON_IsString(name) || name->valuestring[0] == '\0') {
            tn_errf(err, errlen, "messages[%zu].tool_calls[%d].function.name is missing", idx, k);
            return TN_ERR_ARG;
        }
        c->name = dup_str(name->valuestring);
        if (cJSON_IsString(id))
            c->id = dup_str(id->valuestring);
        if (cJSON_IsString(args)) {
            c->arguments = dup_str(args->valuestring);
        } else if (!args || cJSON_IsNull(args)) {
            c->arguments = dup_str("{}");
        } else { /* an object: the text the chat templates' tojson prints */
            sbuf b;
            sb_init(&b);
            if (json_dump_python(args, &b) != TN_OK) {
                sb_free(&b);
                return TN_ERR_NOMEM;
            }
            c->arguments = sb_take(&b);
        }
        if (!c->name || !c->arguments || (cJSON_IsString(id) && !c->id))
            return TN_ERR_NOMEM;
    }
    return TN_OK;
}

static int check_tools(const cJSON *tools, char *err, size_t errlen)
{
    if (!cJSON_IsArray(tools)) {
        tn_errf(err, errlen, "tools must be an array");
        return TN_ERR_ARG;
    }
    int k = 0;
    for (const cJSON *t = tools->child; t; t = t->next, k++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0) {
            tn_errf(err, errlen, "tools[%d].type must be \"function\"", k);
            return TN_ERR_ARG;
        }
        if (!cJSON_IsString(name) || name->valuestring[0] == '\0') {
            tn_errf(err, errlen, "tools[%d].function.name is missing", k);
            return TN_ERR_ARG;
        }
        if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc)) {
            tn_errf(err, errlen, "tools[%d].function.description must be a string", k);
            return TN_ERR_ARG;
        }
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
            tn_errf(err, errlen, "tools[%d].function.parameters must be an object", k);
            return TN_ERR_ARG;
        }
    }
    return TN_OK;
}

int chat_conversation_from_json(const cJSON *messages, const cJSON *tools, chat_conversation *out,
                                char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0) {
        tn_errf(err, errlen, "messages must be a non-empty array");
        return TN_ERR_ARG;
    }
    size_t n = (size_t)cJSON_GetArraySize(messages);
    out->messages = calloc(n, sizeof(*out->messages));
    if (!out->messages) {
        tn_errf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    int rc = TN_OK;
    size_t i = 0;
    for (const cJSON *m = messages->child; m && rc == TN_OK; m = m->next, i++) {
        chat_message *cm = &out->messages[i];
        out->n_messages++;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            tn_errf(err, errlen, "messages[%zu] needs a string \"role\"", i);
            rc = TN_ERR_ARG;
            break;
        }
        if (!parse_role(role->valuestring, &cm->role)) {
            tn_errf(err, errlen, "messages[%zu].role: unknown role '%.40s'", i, role->valuestring);
            rc = TN_ERR_ARG;
            break;
        }
        rc = parse_content(cJSON_GetObjectItemCaseSensitive(m, "content"), &cm->content, i, err, errlen);
        if (rc == TN_OK)
            rc = opt_string(m, "reasoning_content", &cm->reasoning, i, err, errlen);
        if (rc == TN_OK && !cm->reasoning)
            rc = opt_string(m, "reasoning", &cm->reasoning, i, err, errlen);
        if (rc == TN_OK)
            rc = opt_string(m, "tool_call_id", &cm->tool_call_id, i, err, errlen);
        if (rc == TN_OK)
            rc = opt_string(m, "name", &cm->name, i, err, errlen);
        if (rc == TN_OK)
            rc = parse_tool_calls(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), cm, i, err, errlen);
        if (rc == TN_OK && cm->role != CHAT_ROLE_ASSISTANT && cm->n_tool_calls) {
            tn_errf(err, errlen, "messages[%zu]: only assistant messages carry tool_calls", i);
            rc = TN_ERR_ARG;
        }
    }
    if (rc == TN_OK && tools && !cJSON_IsNull(tools)) {
        rc = check_tools(tools, err, errlen);
        if (rc == TN_OK && cJSON_GetArraySize(tools) > 0) {
            out->tools = cJSON_Duplicate(tools, 1);
            if (!out->tools)
                rc = TN_ERR_NOMEM;
        }
    }
    if (rc != TN_OK) {
        if (rc == TN_ERR_NOMEM)
            tn_errf(err, errlen, "out of memory");
        chat_conversation_free(out);
    }
    return rc;
}

void chat_conversation_free(chat_conversation *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_messages; i++) {
        chat_message *m = &c->messages[i];
        free(m->content);
        free(m->reasoning);
        free(m->tool_call_id);
        free(m->name);
        for (size_t k = 0; k < m->n_tool_calls; k++) {
            free(m->tool_calls[k].id);
            free(m->tool_calls[k].name);
            free(m->tool_calls[k].arguments);
        }
        free(m->tool_calls);
    }
    free(c->messages);
    cJSON_Delete(c->tools);
    memset(c, 0, sizeof(*c));
}
