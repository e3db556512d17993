/* JSON Schema and tool calls to grammar programs (router/schema_grammar.h). */
#include "router/schema_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "engine/grammar.h"

#define NUM_DIGITS 16
#define EXP_DIGITS 3

typedef struct memo {
    const cJSON *node;
    int rule;
} memo;

typedef struct sg {
    tm_grammar_builder b;
    const cJSON *root;
    memo *memo;
    int n_memo, cap_memo;
    /* shared rules, -1 until first use */
    int chr, str_rest, value, number, integer, digits[NUM_DIGITS + 1];
    char *err;
    size_t errlen;
    int depth;
} sg;

static int fail(sg *s, const char *fmt, const char *what)
{
    tn_errf(s->err, s->errlen, fmt, what);
    return -1;
}

static int new_rule(sg *s)
{
    int r = tm_gb_rule_new(&s->b);
    if (r < 0)
        tn_errf(s->err, s->errlen, "out of memory");
    return r;
}

static void lit(sg *s, int r, const char *t)
{
    tm_gb_lit(&s->b, r, t, strlen(t));
}

/* One character inside a JSON string: printable ASCII but '"' and '\',
 * an escape, or a well-formed UTF-8 sequence (no overlongs, no
 * surrogates). */
static int rule_chr(sg *s)
{
    if (s->chr >= 0)
        return s->chr;
    int r = s->chr = new_rule(s), esc = new_rule(s), cont = new_rule(s), hex = new_rule(s);
    if (r < 0 || esc < 0 || cont < 0 || hex < 0)
        return -1;
    uint32_t set[8] = {0};
    for (unsigned c = 0x20; c < 0x80; c++)
        if (c != '"' && c != '\\')
            set[c >> 5] |= 1u << (c & 31);
    tm_gb_set(&s->b, r, set);
    tm_gb_alt(&s->b, r);
    lit(s, r, "\\");
    tm_gb_ref(&s->b, r, esc);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xC2, 0xDF);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xE0, 0xE0);
    tm_gb_range(&s->b, r, 0xA0, 0xBF);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xE1, 0xEC);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xED, 0xED);
    tm_gb_range(&s->b, r, 0x80, 0x9F);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xEE, 0xEF);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xF0, 0xF0);
    tm_gb_range(&s->b, r, 0x90, 0xBF);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xF1, 0xF3);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_alt(&s->b, r);
    tm_gb_range(&s->b, r, 0xF4, 0xF4);
    tm_gb_range(&s->b, r, 0x80, 0x8F);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_ref(&s->b, r, cont);
    tm_gb_range(&s->b, cont, 0x80, 0xBF);
    uint32_t e[8] = {0};
    for (const char *p = "\"\\/bfnrt"; *p; p++)
        e[(uint8_t)*p >> 5] |= 1u << (*p & 31);
    tm_gb_set(&s->b, esc, e);
    tm_gb_alt(&s->b, esc);
    lit(s, esc, "u");
    for (int i = 0; i < 4; i++)
        tm_gb_ref(&s->b, esc, hex);
    tm_gb_range(&s->b, hex, '0', '9');
    tm_gb_alt(&s->b, hex);
    tm_gb_range(&s->b, hex, 'a', 'f');
    tm_gb_alt(&s->b, hex);
    tm_gb_range(&s->b, hex, 'A', 'F');
    return r;
}

/* A string of min..max characters (max < 0: unbounded). */
static int rule_string(sg *s, int min, int max)
{
    int chr = rule_chr(s);
    if (chr < 0)
        return -1;
    if (max < 0 && s->str_rest < 0) {
        /* rest ::= '"' | chr rest */
        int rest = s->str_rest = new_rule(s);
        if (rest < 0)
            return -1;
        lit(s, rest, "\"");
        tm_gb_alt(&s->b, rest);
        tm_gb_ref(&s->b, rest, chr);
        tm_gb_ref(&s->b, rest, rest);
    }
    /* tail: after min characters */
    int tail;
    if (max < 0) {
        tail = s->str_rest;
    } else {
        /* opt_k ::= '"' | chr opt_{k-1}, opt_0 ::= '"' */
        tail = new_rule(s);
        if (tail < 0)
            return -1;
        lit(s, tail, "\"");
        for (int k = 1; k <= max - min; k++) {
            int o = new_rule(s);
            if (o < 0)
                return -1;
            lit(s, o, "\"");
            tm_gb_alt(&s->b, o);
            tm_gb_ref(&s->b, o, chr);
            tm_gb_ref(&s->b, o, tail);
            tail = o;
        }
    }
    int r = new_rule(s);
    if (r < 0)
        return -1;
    lit(s, r, "\"");
    for (int i = 0; i < min; i++)
        tm_gb_ref(&s->b, r, chr);
    tm_gb_ref(&s->b, r, tail);
    return r;
}

/* digits[k]: up to k more digits */
static int rule_digits(sg *s, int k)
{
    if (s->digits[k] >= 0)
        return s->digits[k];
    int r = new_rule(s);
    if (r < 0)
        return -1;
    s->digits[k] = r;
    if (k > 0) {
        int next = rule_digits(s, k - 1);
        if (next < 0)
            return -1;
        tm_gb_range(&s->b, r, '0', '9');
        tm_gb_ref(&s->b, r, next);
        tm_gb_alt(&s->b, r);
    }
    return r; /* the empty alternative */
}

static int rule_integer(sg *s)
{
    if (s->integer >= 0)
        return s->integer;
    int r = s->integer = new_rule(s), d = rule_digits(s, NUM_DIGITS - 1);
    if (r < 0 || d < 0)
        return -1;
    static const char *const lead[] = { "", "-" };
    for (int i = 0; i < 2; i++) {
        if (i)
            tm_gb_alt(&s->b, r);
        lit(s, r, lead[i]);
        lit(s, r, "0");
        tm_gb_alt(&s->b, r);
        lit(s, r, lead[i]);
        tm_gb_range(&s->b, r, '1', '9');
        tm_gb_ref(&s->b, r, d);
    }
    return r;
}

static int rule_number(sg *s)
{
    if (s->number >= 0)
        return s->number;
    int r = s->number = new_rule(s), in = rule_integer(s), frac = new_rule(s), ex = new_rule(s),
        sign = new_rule(s), fd = rule_digits(s, NUM_DIGITS - 1), ed = rule_digits(s, EXP_DIGITS - 1);
    if (r < 0 || in < 0 || frac < 0 || ex < 0 || sign < 0 || fd < 0 || ed < 0)
        return -1;
    tm_gb_ref(&s->b, r, in);
    tm_gb_ref(&s->b, r, frac);
    tm_gb_ref(&s->b, r, ex);
    /* frac ::= '.' [0-9] digits | empty */
    lit(s, frac, ".");
    tm_gb_range(&s->b, frac, '0', '9');
    tm_gb_ref(&s->b, frac, fd);
    tm_gb_alt(&s->b, frac);
    /* ex ::= [eE] sign [0-9] digits | empty */
    uint32_t e[8] = {0};
    e['e' >> 5] |= 1u << ('e' & 31);
    e['E' >> 5] |= 1u << ('E' & 31);
    tm_gb_set(&s->b, ex, e);
    tm_gb_ref(&s->b, ex, sign);
    tm_gb_range(&s->b, ex, '0', '9');
    tm_gb_ref(&s->b, ex, ed);
    tm_gb_alt(&s->b, ex);
    lit(s, sign, "+");
    tm_gb_alt(&s->b, sign);
    lit(s, sign, "-");
    tm_gb_alt(&s->b, sign);
    return r;
}

/* Any JSON value (json_object's members, schemas without a type). */
static int rule_value(sg *s)
{
    if (s->value >= 0)
        return s->value;
    int v = s->value = new_rule(s), obj = new_rule(s), orest = new_rule(s), arr = new_rule(s),
        arest = new_rule(s), str = rule_string(s, 0, -1), num = rule_number(s);
    if (v < 0 || obj < 0 || orest < 0 || arr < 0 || arest < 0 || str < 0 || num < 0)
        return -1;
    tm_gb_ref(&s->b, v, obj);
    tm_gb_alt(&s->b, v);
    tm_gb_ref(&s->b, v, arr);
    tm_gb_alt(&s->b, v);
    tm_gb_ref(&s->b, v, str);
    tm_gb_alt(&s->b, v);
    tm_gb_ref(&s->b, v, num);
    static const char *const words[] = { "true", "false", "null" };
    for (int i = 0; i < 3; i++) {
        tm_gb_alt(&s->b, v);
        lit(s, v, words[i]);
    }
    /* obj ::= '{' '}' | '{' str ':' value orest; orest ::= '}' | ',' str ':' value orest */
    lit(s, obj, "{}");
    tm_gb_alt(&s->b, obj);
    lit(s, obj, "{");
    tm_gb_ref(&s->b, obj, str);
    lit(s, obj, ":");
    tm_gb_ref(&s->b, obj, v);
    tm_gb_ref(&s->b, obj, orest);
    lit(s, orest, "}");
    tm_gb_alt(&s->b, orest);
    lit(s, orest, ",");
    tm_gb_ref(&s->b, orest, str);
    lit(s, orest, ":");
    tm_gb_ref(&s->b, orest, v);
    tm_gb_ref(&s->b, orest, orest);
    lit(s, arr, "[]");
    tm_gb_alt(&s->b, arr);
    lit(s, arr, "[");
    tm_gb_ref(&s->b, arr, v);
    tm_gb_ref(&s->b, arr, arest);
    lit(s, arest, "]");
    tm_gb_alt(&s->b, arest);
    lit(s, arest, ",");
    tm_gb_ref(&s->b, arest, v);
    tm_gb_ref(&s->b, arest, arest);
    return v;
}

/* The JSON text of a value (a key, an enum member) as a literal. */
static int json_literal(sg *s, int r, const cJSON *v)
{
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        tn_errf(s->err, s->errlen, "out of memory");
        return -1;
    }
    lit(s, r, t);
    cJSON_free(t);
    return 0;
}

static int key_literal(sg *s, int r, const char *key)
{
    cJSON *k = cJSON_CreateString(key);
    if (!k)
        return fail(s, "%s", "out of memory");
    int rc = json_literal(s, r, k);
    cJSON_Delete(k);
    lit(s, r, ":");
    return rc;
}

static int compile(sg *s, const cJSON *node);

static const char *const known_keys[] = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "anyOf", "$ref", "$defs", "definitions", "description", "title", "default", "examples",
    "$schema", "$id", "$comment", "minLength", "maxLength", "minItems", "maxItems",
};

static int get_bound(sg *s, const cJSON *node, const char *key, int dflt, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, key);
    *out = dflt;
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > SG_MAX_BOUND ||
        v->valuedouble != (double)(int)v->valuedouble)
        return fail(s, "'%s' must be an integer from 0 to " "1000", key);
    *out = (int)v->valuedouble;
    return 0;
}

static int compile_object(sg *s, const cJSON *node, int r)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(node, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(node, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(node, "additionalProperties");
    if (props && !cJSON_IsObject(props))
        return fail(s, "%s must be an object", "'properties'");
    if (req && !cJSON_IsArray(req))
        return fail(s, "%s must be an array of property names", "'required'");
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
        return fail(s, "%s must be a boolean or a schema", "'additionalProperties'");
    const cJSON *q;
    cJSON_ArrayForEach(q, req) {
        if (!cJSON_IsString(q))
            return fail(s, "%s must be an array of property names", "'required'");
        if (!cJSON_GetObjectItemCaseSensitive(props, q->valuestring))
            return fail(s, "'required' names '%s', which is not in 'properties'", q->valuestring);
    }
    int n = cJSON_GetArraySize(props);
    /* P[i][f]: before property i, f = something was written already */
    int *P = malloc(((size_t)n + 1) * 2 * sizeof *P);
    if (!P)
        return fail(s, "%s", "out of memory");
    for (int i = 0; i <= n; i++)
        for (int f = 0; f < 2; f++)
            if ((P[2 * i + f] = new_rule(s)) < 0) {
                free(P);
                return -1;
            }
    lit(s, P[2 * n], "}");
    lit(s, P[2 * n + 1], "}");
    int i = 0, rc = 0;
    cJSON_ArrayForEach(q, props) {
        int required = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, req)
            required |= strcmp(x->valuestring, q->string) == 0;
        int v = compile(s, q);
        if (v < 0) {
            rc = -1;
            break;
        }
        for (int f = 0; f < 2; f++) {
            int rr = P[2 * i + f];
            if (f)
                lit(s, rr, ",");
            if (key_literal(s, rr, q->string) != 0) {
                rc = -1;
                break;
            }
            tm_gb_ref(&s->b, rr, v);
            tm_gb_ref(&s->b, rr, P[2 * (i + 1) + 1]);
            if (!required) {
                tm_gb_alt(&s->b, rr);
                tm_gb_ref(&s->b, rr, P[2 * (i + 1) + f]);
            }
        }
        if (rc)
            break;
        i++;
    }
    if (rc == 0) {
        lit(s, r, "{");
        tm_gb_ref(&s->b, r, P[0]);
    }
    free(P);
    return rc;
}

static int compile_array(sg *s, const cJSON *node, int r)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(node, "items");
    int item = items ? compile(s, items) : rule_value(s), min, max;
    if (item < 0 || get_bound(s, node, "minItems", 0, &min) || get_bound(s, node, "maxItems", -1, &max))
        return -1;
    if (max >= 0 && max < min)
        return fail(s, "%s", "'maxItems' is below 'minItems'");
    /* A[k]: k items written; unbounded: A[last] loops */
    int last = max >= 0 ? max : (min > 1 ? min : 1);
    int *A = malloc(((size_t)last + 1) * sizeof *A);
    if (!A)
        return fail(s, "%s", "out of memory");
    for (int k = 0; k <= last; k++)
        if ((A[k] = new_rule(s)) < 0) {
            free(A);
            return -1;
        }
    for (int k = 0; k <= last; k++) {
        int alt = 0;
        if (k >= min) {
            lit(s, A[k], "]");
            alt = 1;
        }
        if (max < 0 || k < max) {
            if (alt)
                tm_gb_alt(&s->b, A[k]);
            if (k > 0)
                lit(s, A[k], ",");
            tm_gb_ref(&s->b, A[k], item);
            tm_gb_ref(&s->b, A[k], A[k < last ? k + 1 : last]);
        }
    }
    lit(s, r, "[");
    tm_gb_ref(&s->b, r, A[0]);
    free(A);
    return 0;
}

static int compile_type(sg *s, const cJSON *node, const char *type, int r)
{
    if (!strcmp(type, "object"))
        return compile_object(s, node, r);
    if (!strcmp(type, "array"))
        return compile_array(s, node, r);
    int sub = -1;
    if (!strcmp(type, "string")) {
        int min, max;
        if (get_bound(s, node, "minLength", 0, &min) || get_bound(s, node, "maxLength", -1, &max))
            return -1;
        if (max >= 0 && max < min)
            return fail(s, "%s", "'maxLength' is below 'minLength'");
        sub = rule_string(s, min, max);
    } else if (!strcmp(type, "number")) {
        sub = rule_number(s);
    } else if (!strcmp(type, "integer")) {
        sub = rule_integer(s);
    } else if (!strcmp(type, "boolean")) {
        lit(s, r, "true");
        tm_gb_alt(&s->b, r);
        lit(s, r, "false");
        return 0;
    } else if (!strcmp(type, "null")) {
        lit(s, r, "null");
        return 0;
    } else {
        return fail(s, "unknown type '%s'", type);
    }
    if (sub < 0)
        return -1;
    tm_gb_ref(&s->b, r, sub);
    return 0;
}

/* "#", "#/$defs/NAME", "#/definitions/NAME" (JSON pointer, ~0 ~1). */
static const cJSON *resolve(sg *s, const char *ref)
{
    if (!strcmp(ref, "#"))
        return s->root;
    const cJSON *at = s->root;
    if (ref[0] != '#' || ref[1] != '/')
        return NULL;
    const char *p = ref + 2;
    char part[256];
    while (*p && at) {
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof part) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                part[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                part[n++] = *p++;
            }
        }
        part[n] = 0;
        if (*p == '/')
            p++;
        at = cJSON_IsArray(at) ? NULL : cJSON_GetObjectItemCaseSensitive(at, part);
    }
    return at;
}

static int compile(sg *s, const cJSON *node)
{
    for (int i = 0; i < s->n_memo; i++)
        if (s->memo[i].node == node)
            return s->memo[i].rule;
    if (cJSON_IsTrue(node))
        return rule_value(s);
    if (!cJSON_IsObject(node))
        return fail(s, "%s", "a schema must be an object");
    if (++s->depth > 64)
        return fail(s, "%s", "the schema nests more than 64 deep");
    const cJSON *k;
    cJSON_ArrayForEach(k, node) {
        int known = 0;
        for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
            known |= strcmp(k->string, known_keys[i]) == 0;
        if (!known)
            return fail(s, "'%s' is not supported (see docs/API.md, structured outputs)", k->string);
    }
    int r = new_rule(s);
    if (r < 0)
        return -1;
    if (s->n_memo == s->cap_memo) {
        int cap = s->cap_memo ? 2 * s->cap_memo : 16;
        memo *m = realloc(s->memo, (size_t)cap * sizeof *m);
        if (!m)
            return fail(s, "%s", "out of memory");
        s->memo = m;
        s->cap_memo = cap;
    }
    s->memo[s->n_memo++] = (memo){ node, r };
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(node, "$ref");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(node, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(node, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(node, "anyOf");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(node, "type");
    int rc = 0;
    if (ref) {
        const cJSON *t = cJSON_IsString(ref) ? resolve(s, ref->valuestring) : NULL;
        if (!t)
            return fail(s, "'$ref' %s does not resolve (only #, #/$defs/.. and #/definitions/..)",
                        cJSON_IsString(ref) ? ref->valuestring : "");
        int sub = compile(s, t);
        if (sub < 0)
            return -1;
        tm_gb_ref(&s->b, r, sub);
    } else if (cn) {
        rc = json_literal(s, r, cn);
    } else if (en) {
        if (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0)
            return fail(s, "%s", "'enum' must be a non-empty array");
        const cJSON *v;
        int first = 1;
        cJSON_ArrayForEach(v, en) {
            if (!first)
                tm_gb_alt(&s->b, r);
            first = 0;
            if ((rc = json_literal(s, r, v)) != 0)
                break;
        }
    } else if (any) {
        if (!cJSON_IsArray(any) || cJSON_GetArraySize(any) == 0)
            return fail(s, "%s", "'anyOf' must be a non-empty array of schemas");
        const cJSON *v;
        int first = 1;
        cJSON_ArrayForEach(v, any) {
            int sub = compile(s, v);
            if (sub < 0)
                return -1;
            if (!first)
                tm_gb_alt(&s->b, r);
            first = 0;
            tm_gb_ref(&s->b, r, sub);
        }
    } else if (cJSON_IsString(type)) {
        rc = compile_type(s, node, type->valuestring, r);
    } else if (cJSON_IsArray(type) && cJSON_GetArraySize(type) > 0) {
        const cJSON *t;
        int first = 1;
        cJSON_ArrayForEach(t, type) {
            if (!cJSON_IsString(t))
                return fail(s, "%s", "'type' must be a string or an array of strings");
            int sub = new_rule(s);
            if (sub < 0 || compile_type(s, node, t->valuestring, sub) != 0)
                return -1;
            if (!first)
                tm_gb_alt(&s->b, r);
            first = 0;
            tm_gb_ref(&s->b, r, sub);
        }
    } else if (type) {
        return fail(s, "%s", "'type' must be a string or an array of strings");
    } else if (cJSON_GetObjectItemCaseSensitive(node, "properties")) {
        rc = compile_object(s, node, r);
    } else if (cJSON_GetObjectItemCaseSensitive(node, "items")) {
        rc = compile_array(s, node, r);
    } else {
        int v = rule_value(s);
        if (v < 0)
            return -1;
        tm_gb_ref(&s->b, r, v);
    }
    s->depth--;
    return rc ? -1 : r;
}

static void sg_init(sg *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    tm_gb_init(&s->b);
    s->chr = s->str_rest = s->value = s->number = s->integer = -1;
    for (int i = 0; i <= NUM_DIGITS; i++)
        s->digits[i] = -1;
    s->err = err;
    s->errlen = errlen;
}

static void sg_free(sg *s)
{
    tm_gb_free(&s->b);
    free(s->memo);
}

static int finish(sg *s, int32_t **code, int *n_code)
{
    int rc = tm_gb_finish(&s->b, code, n_code);
    if (rc != TN_OK)
        tn_errf(s->err, s->errlen, rc == TN_ERR_NOMEM ? "out of memory" : "the schema is too large");
    return rc;
}

int sg_compile_schema(const cJSON *schema, int32_t **code, int *n_code, char *err, size_t errlen)
{
    sg s;
    sg_init(&s, err, errlen);
    s.root = schema;
    int root = new_rule(&s), v = root >= 0 ? compile(&s, schema) : -1;
    int rc = TN_ERR_ARG;
    if (v >= 0) {
        tm_gb_ref(&s.b, root, v);
        rc = finish(&s, code, n_code);
    }
    sg_free(&s);
    return rc;
}

/* ------------------------------------------------------- chat wrappings */

static int32_t special(const bpe_tokenizer *tok, const char *text)
{
    int32_t id = tok ? bpe_token_id(tok, text) : -1;
    return id >= 0 && bpe_token_is_added(tok, id) ? id : -1;
}

/* A marker: the vocabulary's added token, or its text as bytes. */
static void marker(sg *s, int r, const bpe_tokenizer *tok, const char *text)
{
    int32_t id = special(tok, text);
    if (id >= 0)
        tm_gb_token(&s->b, r, id);
    else
        lit(s, r, text);
}

static const cJSON *tool_function(const cJSON *tool)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tool, "function");
    return cJSON_IsObject(f) ? f : NULL;
}

/* One tool call of function f in the format's syntax, appended to rule r. */
static int tool_call(sg *s, int r, const bpe_tokenizer *tok, sg_wrap wrap, const cJSON *f)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return fail(s, "%s", "a tool without a function name");
    s->root = params;
    int args = params ? compile(s, params) : rule_value(s);
    if (args < 0)
        return -1;
    if (wrap == SG_WRAP_HARMONY) {
        marker(s, r, tok, "<|channel|>");
        lit(s, r, "commentary to=functions.");
        lit(s, r, name->valuestring);
        lit(s, r, " ");
        marker(s, r, tok, "<|constrain|>");
        lit(s, r, "json");
        marker(s, r, tok, "<|message|>");
        tm_gb_ref(&s->b, r, args);
        marker(s, r, tok, "<|call|>");
    } else {
        marker(s, r, tok, "<tool_call>");
        lit(s, r, "\n{\"name\":");
        if (json_literal(s, r, name) != 0)
            return -1;
        lit(s, r, ",\"arguments\":");
        tm_gb_ref(&s->b, r, args);
        lit(s, r, "}\n");
        marker(s, r, tok, "</tool_call>");
    }
    return 0;
}

static int bad(char *param, size_t param_len, const char *which, int rc)
{
    snprintf(param, param_len, "%s", which);
    return rc;
}

int sg_build(const sg_request *q, const bpe_tokenizer *tok, int chat, int32_t **code, int *n_code,
             char *param, size_t param_len, char *err, size_t errlen)
{
    *code = NULL;
    *n_code = 0;
    param[0] = 0;
    sg_wrap wrap = SG_WRAP_PLAIN;
    if (chat && tok)
        wrap = bpe_tokenizer_kind(tok) == BPE_KIND_O200K_HARMONY ? SG_WRAP_HARMONY : SG_WRAP_QWEN3;
    /* which tool, if one is forced */
    const cJSON *tc = q->tool_choice, *forced = NULL;
    int required = 0;
    if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) {
        required = 1;
    } else if (cJSON_IsObject(tc)) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (!cJSON_IsString(nm))
            return bad(param, param_len, "tool_choice",
                       tn_fail(err, errlen, TN_ERR_ARG,
                               "tool_choice must be \"none\", \"auto\", \"required\" or "
                               "{\"type\":\"function\",\"function\":{\"name\":...}}"));
        const cJSON *t;
        cJSON_ArrayForEach(t, q->tools) {
            const cJSON *f = tool_function(t);
            const cJSON *n = f ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
            if (cJSON_IsString(n) && !strcmp(n->valuestring, nm->valuestring))
                forced = f;
        }
        if (!forced)
            return bad(param, param_len, "tool_choice",
                       tn_fail(err, errlen, TN_ERR_ARG, "tool_choice names '%s', which is not in tools",
                               nm->valuestring));
    }
    if ((required || forced) && (!chat || !tok))
        return bad(param, param_len, "tool_choice",
                   tn_fail(err, errlen, TN_ERR_ARG,
                           "tool_choice \"required\" or a named function needs a chat format "
                           "(the router's --tokenizer is a vocabulary, not bytes)"));
    if (required && cJSON_GetArraySize(q->tools) == 0)
        return bad(param, param_len, "tool_choice",
                   tn_fail(err, errlen, TN_ERR_ARG, "tool_choice \"required\" needs tools"));
    const cJSON *rf = q->response_format, *schema = NULL;
    int json = 0;
    if (rf) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(t))
            return bad(param, param_len, "response_format",
                       tn_fail(err, errlen, TN_ERR_ARG, "response_format needs a \"type\""));
        if (!strcmp(t->valuestring, "json_object")) {
            json = 1;
        } else if (!strcmp(t->valuestring, "json_schema")) {
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
            const cJSON *nm = js ? cJSON_GetObjectItemCaseSensitive(js, "name") : NULL;
            schema = js ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
            if (!cJSON_IsObject(js) || !cJSON_IsString(nm))
                return bad(param, param_len, "response_format",
                           tn_fail(err, errlen, TN_ERR_ARG,
                                   "response_format json_schema needs json_schema.name"));
            json = 2;
        } else if (strcmp(t->valuestring, "text")) {
            return bad(param, param_len, "response_format",
                       tn_fail(err, errlen, TN_ERR_ARG,
                               "response_format type must be text, json_object or json_schema"));
        }
    }
    if (!json && !required && !forced)
        return TN_OK;
    sg s;
    sg_init(&s, err, errlen);
    int root = new_rule(&s), rc = root < 0 ? TN_ERR_NOMEM : TN_OK;
    const char *which = "response_format";
    if (rc == TN_OK && (required || forced)) {
        which = "tools";
        const cJSON *t;
        int first = 1;
        cJSON_ArrayForEach(t, q->tools) {
            const cJSON *f = tool_function(t);
            if (!f || (forced && f != forced))
                continue;
            int call = new_rule(&s);
            if (call < 0 || tool_call(&s, call, tok, wrap, f) != 0) {
                rc = TN_ERR_ARG;
                break;
            }
            if (!first)
                tm_gb_alt(&s.b, root);
            first = 0;
            tm_gb_ref(&s.b, root, call);
        }
    } else if (rc == TN_OK) {
        int v;
        if (json == 1) {
            /* json_object: an object of any members */
            int any = rule_value(&s), str = rule_string(&s, 0, -1), orest = new_rule(&s);
            v = new_rule(&s);
            if (any >= 0 && str >= 0 && orest >= 0 && v >= 0) {
                lit(&s, v, "{}");
                tm_gb_alt(&s.b, v);
                lit(&s, v, "{");
                tm_gb_ref(&s.b, v, str);
                lit(&s, v, ":");
                tm_gb_ref(&s.b, v, any);
                tm_gb_ref(&s.b, v, orest);
                lit(&s, orest, "}");
                tm_gb_alt(&s.b, orest);
                lit(&s, orest, ",");
                tm_gb_ref(&s.b, orest, str);
                lit(&s, orest, ":");
                tm_gb_ref(&s.b, orest, any);
                tm_gb_ref(&s.b, orest, orest);
            } else {
                v = -1;
            }
        } else {
            s.root = schema;
            v = schema ? compile(&s, schema) : rule_value(&s);
        }
        if (v < 0) {
            rc = TN_ERR_ARG;
        } else {
            if (wrap == SG_WRAP_HARMONY) {
                marker(&s, root, tok, "<|channel|>");
                lit(&s, root, "final");
                marker(&s, root, tok, "<|message|>");
            }
            tm_gb_ref(&s.b, root, v);
        }
    }
    if (rc == TN_OK)
        rc = finish(&s, code, n_code);
    else if (err[0] && strncmp(err, which, strlen(which)) != 0) {
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%s", err);
        tn_errf(err, errlen, "%s: %s", !strcmp(which, "tools") ? "tools[].function.parameters"
                                                    : "response_format.json_schema.schema",
                tmp);
    }
    if (rc != TN_OK)
        snprintf(param, param_len, "%s", which);
    sg_free(&s);
    return rc;
}
