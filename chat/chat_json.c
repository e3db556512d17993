#include "chat/chat_json.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

int json_dump_string(const char *s, sbuf *out)
{
    int rc = sb_putc(out, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p && rc == TN_OK; p++) {
        char esc[8];
        switch (*p) {
        case '"': rc = sb_append(out, "\\\"", 2); break;
        case '\\': rc = sb_append(out, "\\\\", 2); break;
        case '\n': rc = sb_append(out, "\\n", 2); break;
        case '\r': rc = sb_append(out, "\\r", 2); break;
        case '\t': rc = sb_append(out, "\\t", 2); break;
        case '\b': rc = sb_append(out, "\\b", 2); break;
        case '\f': rc = sb_append(out, "\\f", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", *p);
                rc = sb_append(out, esc, 6);
            } else {
                rc = sb_putc(out, (char)*p);
            }
        }
    }
    return rc == TN_OK ? sb_putc(out, '"') : rc;
}

/* Python float repr: the shortest digits that read back to the same
 * double, in fixed notation when the decimal exponent is in [-4, 16),
 * otherwise d.ddde+XX. */
static int dump_float(double v, sbuf *out)
{
    if (isnan(v) || isinf(v))
        return sb_puts(out, isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity"));
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    /* buf is [-]d[.ddd]e[+-]XX: split digits and exponent */
    const char *s = buf;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    char digits[20];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char res[64];
    int k = 0;
    if (neg)
        res[k++] = '-';
    if (exp >= -5 + 1 && exp < 16) {
        if (exp < 0) {
            res[k++] = '0';
            res[k++] = '.';
            for (int i = 0; i < -exp - 1; i++)
                res[k++] = '0';
            for (int i = 0; i < nd; i++)
                res[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                res[k++] = i < nd ? digits[i] : '0';
            res[k++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    res[k++] = digits[i];
            else
                res[k++] = '0';
        }
        res[k] = '\0';
    } else {
        res[k++] = digits[0];
        if (nd > 1) {
            res[k++] = '.';
            for (int i = 1; i < nd; i++)
                res[k++] = digits[i];
        }
        snprintf(res + k, sizeof(res) - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    return sb_puts(out, res);
}

static int dump_number(double v, sbuf *out)
{
    if (v == floor(v) && fabs(v) <= 9007199254740992.0) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%.0f", v);
        if (strcmp(buf, "-0") == 0)
            return sb_puts(out, "-0.0");
        return sb_puts(out, buf);
    }
    return dump_float(v, out);
}

static int dump(const cJSON *v, sbuf *out, const char *item_sep, const char *key_sep)
{
    if (!v)
        return TN_ERR_ARG;
    int rc = TN_OK;
    if (cJSON_IsNull(v))
        return sb_puts(out, "null");
    if (cJSON_IsTrue(v))
        return sb_puts(out, "true");
    if (cJSON_IsFalse(v))
        return sb_puts(out, "false");
    if (cJSON_IsNumber(v))
        return dump_number(v->valuedouble, out);
    if (cJSON_IsString(v))
        return json_dump_string(v->valuestring, out);
    if (cJSON_IsRaw(v))
        return sb_puts(out, v->valuestring);
    int is_obj = cJSON_IsObject(v);
    if (!is_obj && !cJSON_IsArray(v))
        return TN_ERR_ARG;
    rc = sb_putc(out, is_obj ? '{' : '[');
    for (const cJSON *c = v->child; c && rc == TN_OK; c = c->next) {
        if (c != v->child)
            rc = sb_puts(out, item_sep);
        if (rc == TN_OK && is_obj) {
            rc = json_dump_string(c->string, out);
            if (rc == TN_OK)
                rc = sb_puts(out, key_sep);
        }
        if (rc == TN_OK)
            rc = dump(c, out, item_sep, key_sep);
    }
    return rc == TN_OK ? sb_putc(out, is_obj ? '}' : ']') : rc;
}

int json_dump_python(const cJSON *v, sbuf *out)
{
    return dump(v, out, ", ", ": ");
}

int json_dump_compact(const cJSON *v, sbuf *out)
{
    return dump(v, out, ",", ":");
}
