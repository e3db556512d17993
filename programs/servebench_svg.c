#include "programs/servebench_svg.h"
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "common/sbuf.h"
#include "common/status.h"

enum { W = 1060, H = 450, PANEL_W = 420, PANEL_GAP = 110, PANEL_H = 300, LEFT = 70, TOP = 60 };

/* One axis: value -> pixel offset in [0, len]. */
typedef struct axis {
    double lo, hi;
    int log;
    int len;
} axis;

static double axis_pos(const axis *a, double v)
{
    double f = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                      : (v - a->lo) / (a->hi - a->lo);
    return f * a->len;
}

/* A log axis over whole decades around [lo, hi]; lo > 0. */
static axis log_axis(double lo, double hi, int len)
{
    axis a = {pow(10, floor(log10(lo))), pow(10, ceil(log10(hi))), 1, len};
    if (a.hi <= a.lo)
        a.hi = a.lo * 10;
    return a;
}

/* A linear axis from 0 (or lo) to a round number above hi. */
static axis lin_axis(double lo, double hi, int len)
{
    if (hi <= lo)
        hi = lo + 1;
    double step = pow(10, floor(log10(hi - lo)));
    axis a = {lo, lo + ceil((hi - lo) / step) * step, 0, len};
    return a;
}

static void text(sbuf *b, double x, double y, const char *anchor, int size, const char *s)
{
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor,
              size);
    for (const char *p = s; *p; p++) {
        if (*p == '<')
            sb_puts(b, "&lt;");
        else if (*p == '>')
            sb_puts(b, "&gt;");
        else if (*p == '&')
            sb_puts(b, "&amp;");
        else
            sb_putc(b, *p);
    }
    sb_puts(b, "</text>\n");
}

static void ticks(sbuf *b, const axis *a, int x0, int y0, int vertical)
{
    char label[32];
    int n = a->log ? (int)lround(log10(a->hi) - log10(a->lo)) : 5;
    for (int i = 0; i <= n; i++) {
        double v = a->log ? a->lo * pow(10, i) : a->lo + (a->hi - a->lo) * i / n;
        double p = axis_pos(a, v);
        snprintf(label, sizeof label, "%g", v);
        if (vertical) {
            double y = y0 - p;
            sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                      x0, y, x0 + PANEL_W, y);
            text(b, x0 - 6, y + 4, "end", 11, label);
        } else {
            double x = x0 + p;
            sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n",
                      x, y0, x, y0 - PANEL_H);
            text(b, x, y0 + 16, "middle", 11, label);
        }
    }
}

typedef struct series {
    const char *name, *color, *dash;
    size_t off;   /* offsetof the svb_dist in svb_summary */
    int p99;      /* p99 else p50 */
} series;

/* The series' value in ms; -1 when the point has no samples. */
static double series_value(const svb_point *p, const series *s)
{
    const svb_dist *d = (const svb_dist *)((const char *)&p->s + s->off);
    if (d->n == 0)
        return -1;
    return (s->p99 ? d->p99 : d->p50) * 1e3;
}

static const series SERIES[] = {
    {"TTFT p50", "#1f77b4", "", offsetof(svb_summary, ttft), 0},
    {"TTFT p99", "#1f77b4", "6,4", offsetof(svb_summary, ttft), 1},
    {"ITL p50", "#d62728", "", offsetof(svb_summary, itl), 0},
    {"ITL p99", "#d62728", "6,4", offsetof(svb_summary, itl), 1},
};
#define N_SERIES ((int)(sizeof SERIES / sizeof *SERIES))

static double x_of(const svb_point *p, int panel)
{
    return panel == 0 ? p->load : p->s.total_tok_per_s;
}

static void panel(sbuf *b, const svb_point *pts, int n, int panel_no, const axis *ya,
                  const char *xlabel)
{
    int x0 = LEFT + panel_no * (PANEL_W + PANEL_GAP), y0 = TOP + PANEL_H;
    double xlo = INFINITY, xhi = 0;
    for (int i = 0; i < n; i++) {
        double x = x_of(&pts[i], panel_no);
        if (x > 0 && x < xlo)
            xlo = x;
        if (x > xhi)
            xhi = x;
    }
    if (!(xhi > 0)) {
        text(b, x0 + PANEL_W / 2.0, y0 - PANEL_H / 2.0, "middle", 12, "no data");
        return;
    }
    axis xa = panel_no == 0 && xhi / xlo >= 8 ? log_axis(xlo, xhi, PANEL_W)
                                              : lin_axis(0, xhi, PANEL_W);
    ticks(b, &xa, x0, y0, 0);
    ticks(b, ya, x0, y0, 1);
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                 "stroke=\"#333\"/>\n", x0, TOP, PANEL_W, PANEL_H);
    text(b, x0 + PANEL_W / 2.0, y0 + 36, "middle", 12, xlabel);
    for (int s = 0; s < N_SERIES; s++) {
        sbuf pts_attr;
        sb_init(&pts_attr);
        for (int i = 0; i < n; i++) {
            double x = x_of(&pts[i], panel_no), y = series_value(&pts[i], &SERIES[s]);
            if (!(x > 0) || y < 0 || (xa.log && x < xa.lo))
                continue;
            /* 0 (two chunks read at once) has no place on a log scale: it
             * sits on the axis floor, as the legend says */
            double px = x0 + axis_pos(&xa, x), py = y0 - axis_pos(ya, y > ya->lo ? y : ya->lo);
            sb_printf(&pts_attr, "%.1f,%.1f ", px, py);
            sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px, py,
                      SERIES[s].color);
        }
        if (pts_attr.len)
            sb_printf(b, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>\n",
                      pts_attr.p, SERIES[s].color, SERIES[s].dash[0] ? " stroke-dasharray=\"" : "",
                      SERIES[s].dash, SERIES[s].dash[0] ? "\"" : "");
        sb_free(&pts_attr);
    }
}

int svb_write_svg(const char *path, const svb_run_info *info, const svb_point *pts, int n,
                  char *err, size_t errlen)
{
    double ylo = INFINITY, yhi = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < N_SERIES; s++) {
            double v = series_value(&pts[i], &SERIES[s]);
            if (v > 0 && v < ylo)
                ylo = v;
            if (v > yhi)
                yhi = v;
        }
    sbuf b;
    sb_init(&b);
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n", W, H, W, H);
    sb_printf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    char title[512];
    snprintf(title, sizeof title, "%s%s%s: input %s, output %s tokens (%s)",
             info->label && info->label[0] ? info->label : "tandem-servebench",
             info->model ? ", " : "", info->model ? info->model : "",
             info->lengths_file && info->lengths_file[0] ? "from file" : info->input,
             info->lengths_file && info->lengths_file[0] ? "from file" : info->output, info->api);
    text(&b, W / 2.0, 24, "middle", 15, title);
    text(&b, W - 10, H - 14, "end", 11, "ITL samples of 0 ms (two tokens in one read) are drawn at the bottom edge");
    if (yhi > 0) {
        axis ya = log_axis(ylo, yhi, PANEL_H);
        char xl[64];
        snprintf(xl, sizeof xl, "%s", strcmp(info->load_kind, "rate") == 0
                                          ? "request rate (requests/s)"
                                          : "concurrency (requests in flight)");
        panel(&b, pts, n, 0, &ya, xl);
        panel(&b, pts, n, 1, &ya, "total token throughput (tokens/s)");
        sb_printf(&b, "<text x=\"18\" y=\"%d\" font-size=\"12\" transform=\"rotate(-90 18 %d)\" "
                      "text-anchor=\"middle\">latency (ms, log scale)</text>\n",
                  TOP + PANEL_H / 2, TOP + PANEL_H / 2);
    } else {
        text(&b, W / 2.0, H / 2.0, "middle", 14, "no completed requests: nothing to plot");
    }
    for (int s = 0; s < N_SERIES; s++) {
        int x = LEFT + s * 150, y = H - 14;
        sb_printf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                      "stroke-width=\"2\"%s%s%s/>\n", x, y - 4, x + 28, y - 4, SERIES[s].color,
                  SERIES[s].dash[0] ? " stroke-dasharray=\"" : "", SERIES[s].dash,
                  SERIES[s].dash[0] ? "\"" : "");
        text(&b, x + 34, y, "start", 12, SERIES[s].name);
    }
    sb_puts(&b, "</svg>\n");
    if (b.oom) {
        sb_free(&b);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory for the SVG plot");
    }
    FILE *f = fopen(path, "w");
    int ok = f && fwrite(b.p, 1, b.len, f) == b.len;
    if (f && fclose(f) != 0)
        ok = 0;
    sb_free(&b);
    if (!ok)
        return tn_fail(err, errlen, TN_ERR_SYS, "cannot write %s: %s", path, strerror(errno));
    return TN_OK;
}
