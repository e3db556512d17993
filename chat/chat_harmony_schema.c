/* JSON Schema -> the TypeScript-like type syntax Harmony uses for function
 * tools in the developer message (`type f = (_: { x: string, }) => any;`).
 * Follows the rules of OpenAI's harmony renderer: descriptions, titles and
 * examples become // comments above a property, defaults a trailing
 * comment, enums string-literal unions, integer is number, oneOf a union
 * listed one variant per line, nullable adds "| null", object closing
 * braces indented like the properties. */
#include <stdio.h>
#include <string.h>
#include "chat/chat_harmony.h"
#include "chat/chat_json.h"
#include "common/status.h"

typedef struct writer {
    sbuf *out;
    int rc;
} writer;

static void put(writer *w, const char *s)
{
    if (w->rc == TN_OK)
        w->rc = sb_puts(w->out, s);
}

static void put_json(writer *w, const cJSON *v)
{
    if (w->rc == TN_OK)
        w->rc = json_dump_compact(v, w->out);
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *get_str(const cJSON *o, const char *k)
{
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int is_enum(const cJSON *schema)
{
    const cJSON *e = get(schema, "enum");
    return cJSON_IsArray(e) && cJSON_GetArraySize(e) > 0;
}

static int is_nullable(const cJSON *schema)
{
    return cJSON_IsTrue(get(schema, "nullable"));
}

/* "default: ..." text: a string default is quoted unless the schema is an
 * enum; anything else prints as compact JSON. */
static void put_default(writer *w, const cJSON *schema, const cJSON *def)
{
    put(w, "default: ");
    if (cJSON_IsString(def)) {
        int quote = !is_enum(schema);
        if (quote)
            put(w, "\"");
        put(w, def->valuestring);
        if (quote)
            put(w, "\"");
    } else {
        put_json(w, def);
    }
}

static int is_required(const cJSON *schema, const char *key)
{
    const cJSON *req = get(schema, "required");
    if (!cJSON_IsArray(req))
        return 0;
    for (const cJSON *r = req->child; r; r = r->next)
        if (cJSON_IsString(r) && strcmp(r->valuestring, key) == 0)
            return 1;
    return 0;
}

static void to_ts(writer *w, const cJSON *schema, const char *indent);

/* Appends the type of schema, plus " | null" when nullable and absent. */
static void put_type_nullable(writer *w, const cJSON *schema, const char *indent)
{
    size_t start = w->out->len;
    to_ts(w, schema, indent);
    if (w->rc == TN_OK && is_nullable(schema) && !strstr(w->out->p + start, "null"))
        put(w, " | null");
}

/* Trailing " // description default: x" of a oneOf variant. */
static void put_variant_comments(writer *w, const cJSON *variant, const char *skip_desc,
                                 int no_desc)
{
    const char *desc = no_desc ? NULL : get_str(variant, "description");
    if (desc && skip_desc && strcmp(desc, skip_desc) == 0)
        desc = NULL;
    const cJSON *def = get(variant, "default");
    if (!desc && !def)
        return;
    put(w, " // ");
    if (desc)
        put(w, desc);
    if (desc && def)
        put(w, " ");
    if (def)
        put_default(w, variant, def);
}

static void put_property(writer *w, const cJSON *schema, const cJSON *prop, const char *indent)
{
    const char *key = prop->string;
    const cJSON *one_of = get(prop, "oneOf");
    const char *title = get_str(prop, "title");
    const char *desc = get_str(prop, "description");
    char deeper[256];
    if (title) {
        put(w, indent); put(w, "// "); put(w, title); put(w, "\n");
        put(w, indent); put(w, "//\n");
    }
    if (!one_of && desc) {
        put(w, indent); put(w, "// "); put(w, desc); put(w, "\n");
    }
    const cJSON *examples = get(prop, "examples");
    if (cJSON_IsArray(examples) && cJSON_GetArraySize(examples) > 0) {
        put(w, indent); put(w, "// Examples:\n");
        for (const cJSON *ex = examples->child; ex; ex = ex->next)
            if (cJSON_IsString(ex)) {
                put(w, indent); put(w, "// - \""); put(w, ex->valuestring); put(w, "\"\n");
            }
    }
    const char *opt = is_required(schema, key) ? "" : "?";
    if (cJSON_IsArray(one_of)) {
        const cJSON *first = one_of->child;
        const char *first_desc = first ? get_str(first, "description") : NULL;
        int above = 0;
        if (desc && !(first_desc && strcmp(first_desc, desc) == 0)) {
            put(w, indent); put(w, "// "); put(w, desc); put(w, "\n");
            above = 1;
        }
        const cJSON *def = get(prop, "default");
        if (def) {
            put(w, indent); put(w, "// ");
            put_default(w, prop, def);
            put(w, "\n");
        }
        put(w, indent); put(w, key); put(w, opt); put(w, ":\n");
        snprintf(deeper, sizeof(deeper), "%s   ", indent);
        int i = 0;
        for (const cJSON *v = one_of->child; v; v = v->next, i++) {
            put(w, indent); put(w, " | ");
            put_type_nullable(w, v, deeper);
            put_variant_comments(w, v, desc, i == 0 && above);
            put(w, "\n");
        }
        put(w, indent); put(w, ",\n");
        return;
    }
    put(w, indent); put(w, key); put(w, opt); put(w, ": ");
    snprintf(deeper, sizeof(deeper), "%s    ", indent);
    put_type_nullable(w, prop, deeper);
    put(w, ",");
    const cJSON *def = get(prop, "default");
    if (def) {
        put(w, " // ");
        put_default(w, prop, def);
    }
    put(w, "\n");
}

static void to_ts(writer *w, const cJSON *schema, const char *indent)
{
    if (w->rc != TN_OK)
        return;
    if (strlen(indent) > 200) { /* absurdly deep schema */
        put(w, "any");
        return;
    }
    const cJSON *one_of = get(schema, "oneOf");
    char deeper[256];
    if (cJSON_IsArray(one_of)) {
        snprintf(deeper, sizeof(deeper), "%s   ", indent);
        for (const cJSON *v = one_of->child; v; v = v->next) {
            put(w, "\n"); put(w, indent); put(w, " | ");
            put_type_nullable(w, v, deeper);
            put_variant_comments(w, v, NULL, 0);
        }
        return;
    }
    const cJSON *type = get(schema, "type");
    if (cJSON_IsArray(type)) {
        int n = 0;
        for (const cJSON *t = type->child; t; t = t->next) {
            if (!cJSON_IsString(t))
                continue;
            if (n++)
                put(w, " | ");
            put(w, strcmp(t->valuestring, "integer") == 0 ? "number" : t->valuestring);
        }
        if (n)
            return;
    }
    const char *ty = cJSON_IsString(type) ? type->valuestring : NULL;
    if (!ty) {
        put(w, "any");
        return;
    }
    if (strcmp(ty, "object") == 0) {
        const char *desc = get_str(schema, "description");
        if (desc) {
            put(w, indent); put(w, "// "); put(w, desc); put(w, "\n");
        }
        put(w, "{\n");
        const cJSON *props = get(schema, "properties");
        if (cJSON_IsObject(props))
            for (const cJSON *p = props->child; p; p = p->next)
                put_property(w, schema, p, indent);
        put(w, indent);
        put(w, "}");
    } else if (strcmp(ty, "string") == 0) {
        const cJSON *e = get(schema, "enum");
        int n = 0;
        if (cJSON_IsArray(e))
            for (const cJSON *v = e->child; v; v = v->next)
                if (cJSON_IsString(v)) {
                    if (n++)
                        put(w, " | ");
                    put(w, "\"");
                    put(w, v->valuestring);
                    put(w, "\"");
                }
        if (!n)
            put(w, "string");
    } else if (strcmp(ty, "number") == 0 || strcmp(ty, "integer") == 0) {
        put(w, "number");
    } else if (strcmp(ty, "boolean") == 0) {
        put(w, "boolean");
    } else if (strcmp(ty, "array") == 0) {
        const cJSON *items = get(schema, "items");
        if (items) {
            to_ts(w, items, indent);
            put(w, "[]");
        } else {
            put(w, "Array<any>");
        }
    } else {
        put(w, "any");
    }
}

int harmony_schema_to_typescript(const cJSON *schema, sbuf *out)
{
    writer w = {out, TN_OK};
    to_ts(&w, schema, "");
    return w.rc;
}
