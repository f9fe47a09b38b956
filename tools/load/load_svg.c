/* load_svg.c — self-contained SVG line charts for attnd-load (no library): two series, two
 * y axes, log2 x axis, grid, ticks, legend, title; and for --sessions, tokens/s and time per
 * token over time (linear x axis), one colour per level. */
#include "load_svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define W 900
#define H 540
#define ML 90 /* margins: left, right, top, bottom */
#define MR 90
#define MT 80
#define MB 70
#define PW (W - ML - MR)
#define PH (H - MT - MB)
#define C_RPS "#1f77b4"
#define C_P99 "#d62728"
#define C_OFFER "#555555"

double load_nice_step(double max, int ticks)
{
    if (!(max > 0) || ticks < 1) return 1;
    double raw = max / ticks, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

static void put_escaped(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

/* The x mapping: log2 between lo and hi (already padded). */
typedef struct axes {
    double lo, hi; /* log2 x range */
    double ymax_l, ymax_r;
} axes;

static double px(const axes *a, double v) { return ML + (log2(v) - a->lo) / (a->hi - a->lo) * PW; }
static double py(double v, double ymax) { return MT + PH - v / ymax * PH; }

static void x_tick(FILE *f, const axes *a, double v)
{
    double x = px(a, v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>\n", x, MT, x,
            MT + PH);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"axis\"/>\n", x,
            MT + PH, x, MT + PH + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, MT + PH + 20, v);
}

/* Ticks at the offered rates (open loop) or at powers of two (concurrency). */
static void x_axis(FILE *f, const axes *a, const load_stats *lv, size_t n, int rate)
{
    if (rate) {
        for (size_t i = 0; i < n; i++) x_tick(f, a, lv[i].x);
    } else {
        int first = (int)ceil(a->lo), last = (int)floor(a->hi);
        int step = (last - first) > 12 ? 2 : 1;
        for (int e = first; e <= last; e += step) x_tick(f, a, pow(2, e));
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"label\">%s</text>\n",
            ML + PW / 2, H - 20,
            rate ? "offered rate (requests/s, log2 scale)"
                 : "concurrency (requests in flight, log2 scale)");
}

/* Open loop: where throughput would be if every offered request were answered (a curve on
 * the log2 x axis), from the lowest to the highest offered rate. */
static void offered_line(FILE *f, const axes *a, double xmin, double xmax)
{
    fprintf(f, "<polyline class=\"offered\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
               "stroke-dasharray=\"2 3\" points=\"", C_OFFER);
    for (int i = 0; i <= 64; i++) {
        double v = xmin * pow(xmax / xmin, i / 64.0);
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", px(a, v), py(v, a->ymax_l));
    }
    fputs("\"><title>offered = achieved</title></polyline>\n", f);
}

static void y_axis(FILE *f, double ymax, double step, int right, const char *label,
                   const char *color)
{
    int x0 = right ? ML + PW : ML, dir = right ? 1 : -1;
    for (double v = 0; v <= ymax * (1 + 1e-9); v += step) {
        double y = py(v, ymax);
        if (!right)
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>\n", ML,
                    y, ML + PW, y);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"axis\"/>\n", x0, y,
                x0 + 5 * dir, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"%s\" fill=\"%s\">%g</text>\n",
                x0 + 8 * dir, y + 4, right ? "start" : "end", color, v);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>\n", x0, MT, x0,
            MT + PH);
    int lx = right ? W - 22 : 24, ly = MT + PH / 2;
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" transform=\"rotate(%d %d %d)\" text-anchor=\"middle\" "
            "class=\"label\" fill=\"%s\">%s</text>\n",
            lx, ly, right ? 90 : -90, lx, ly, color, label);
}

/* One series: polyline plus a marker per point. p99 skips levels without successes. */
static void series(FILE *f, const axes *a, const load_stats *lv, size_t n, int p99)
{
    const char *color = p99 ? C_P99 : C_RPS;
    double ymax = p99 ? a->ymax_r : a->ymax_l;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\"%s points=\"", color,
            p99 ? " stroke-dasharray=\"7 4\"" : "");
    for (size_t i = 0; i < n; i++)
        if (!p99 || lv[i].ok)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", px(a, lv[i].x),
                    py(p99 ? lv[i].p99_ms : lv[i].rps, ymax));
    fputs("\"/>\n", f);
    for (size_t i = 0; i < n; i++) {
        if (p99 && !lv[i].ok) continue;
        double v = p99 ? lv[i].p99_ms : lv[i].rps;
        fprintf(
            f,
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>%g: %.2f %s</title></circle>\n",
            px(a, lv[i].x), py(v, ymax), color, lv[i].x, v, p99 ? "ms p99" : "req/s");
    }
}

static void legend(FILE *f, int rate)
{
    int x = ML + 14, y = MT + 12;
    fprintf(
        f,
        "<rect x=\"%d\" y=\"%d\" width=\"190\" height=\"%d\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#999\"/>\n",
        x, y, rate ? 69 : 50);
    if (rate) {
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                   "stroke-width=\"1.5\" stroke-dasharray=\"2 3\"/>\n",
                x + 10, y + 55, x + 40, y + 55, C_OFFER);
        fprintf(f, "<text x=\"%d\" y=\"%d\">offered = achieved</text>\n", x + 48, y + 59);
    }
    fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
            x + 10, y + 17, x + 40, y + 17, C_RPS);
    fprintf(f, "<text x=\"%d\" y=\"%d\">throughput (req/s)</text>\n", x + 48, y + 21);
    fprintf(
        f,
        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2.5\" stroke-dasharray=\"7 4\"/>\n",
        x + 10, y + 36, x + 40, y + 36, C_P99);
    fprintf(f, "<text x=\"%d\" y=\"%d\">p99 latency (ms)</text>\n", x + 48, y + 40);
}

void load_svg_print(FILE *f, const load_stats *lv, size_t n, const char *subtitle)
{
    axes a = {0, 1, 0, 0};
    double xmin = 0, xmax = 0, rmax = 0, lmax = 0;
    int rate = n && lv[0].is_rate;
    for (size_t i = 0; i < n; i++) {
        if (!i || lv[i].x < xmin) xmin = lv[i].x;
        if (!i || lv[i].x > xmax) xmax = lv[i].x;
        if (lv[i].rps > rmax) rmax = lv[i].rps;
        if (lv[i].ok && lv[i].p99_ms > lmax) lmax = lv[i].p99_ms;
    }
    if (n) {
        a.lo = log2(xmin) - 0.35;
        a.hi = log2(xmax) + 0.35;
        if (a.hi - a.lo < 2) a.lo -= 1, a.hi += 1;
    }
    if (rate && xmax > rmax) rmax = xmax; /* the offered = achieved line fits */
    double sl = load_nice_step(rmax * 1.1, 6), sr = load_nice_step(lmax * 1.1, 6);
    a.ymax_l = sl * ceil((rmax > 0 ? rmax * 1.1 : 1) / sl);
    a.ymax_r = sr * ceil((lmax > 0 ? lmax * 1.1 : 1) / sr);

    fprintf(
        f,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n",
        W, H, W, H);
    fputs("<style>.grid{stroke:#e4e4e4;stroke-width:1}.axis{stroke:#333;stroke-width:1}"
          ".label{font-size:14px}.title{font-size:18px;font-weight:bold}</style>\n",
          f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(
        f,
        "<text x=\"%d\" y=\"30\" text-anchor=\"middle\" class=\"title\">attnd-load: throughput and p99 latency vs %s</text>\n",
        W / 2, rate ? "offered rate" : "concurrency");
    if (subtitle) {
        fprintf(f, "<text x=\"%d\" y=\"52\" text-anchor=\"middle\" fill=\"#555\">", W / 2);
        put_escaped(f, subtitle);
        fputs("</text>\n", f);
    }
    if (n) {
        x_axis(f, &a, lv, n, rate);
        y_axis(f, a.ymax_l, sl, 0, "throughput (req/s)", C_RPS);
        y_axis(f, a.ymax_r, sr, 1, "p99 latency (ms)", C_P99);
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>\n", ML, MT + PH,
                ML + PW, MT + PH);
        if (rate) offered_line(f, &a, xmin, xmax);
        series(f, &a, lv, n, 0);
        series(f, &a, lv, n, 1);
        legend(f, rate);
    }
    fputs("</svg>\n", f);
}

int load_svg_write(const char *path, const load_stats *lv, size_t n, const char *subtitle,
                   char *err, size_t el)
{
    FILE *f = fopen(path, "w");
    if (!f) return snprintf(err, el, "--svg: cannot write %s", path), -1;
    load_svg_print(f, lv, n, subtitle);
    if (fclose(f) != 0) return snprintf(err, el, "--svg: cannot write %s", path), -1;
    return 0;
}

/* ---- --sessions: over time --------------------------------------------------------------------- */

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/* Per bin of one level: tokens/s and mean time per token; ok[b] = 0 where the bin is empty or
 * mostly outside the level's decode phase. */
static void bin_level(const load_sess_stats *s, double width, double *tps, double *tpot, int *ok)
{
    size_t count[LOAD_SVG_BINS] = {0};
    double sum[LOAD_SVG_BINS] = {0};
    for (size_t i = 0; i < s->n_steps; i++) {
        int b = (int)(s->step_at_s[i] / width);
        if (b >= LOAD_SVG_BINS) b = LOAD_SVG_BINS - 1;
        if (b < 0) b = 0;
        count[b]++;
        sum[b] += s->step_ms[i];
    }
    for (int b = 0; b < LOAD_SVG_BINS; b++) {
        double start = b * width, covered = s->decode_elapsed_s - start;
        if (covered > width) covered = width;
        ok[b] = count[b] > 0 && covered >= width / 2;
        tps[b] = ok[b] ? (double)count[b] / covered : 0;
        tpot[b] = ok[b] ? sum[b] / (double)count[b] : 0;
    }
}

static double lx(double v, double xmax) { return ML + v / xmax * PW; }

static void linear_x_axis(FILE *f, double xmax, double step)
{
    for (double v = 0; v <= xmax * (1 + 1e-9); v += step) {
        double x = lx(v, xmax);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>\n", x, MT, x,
                MT + PH);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"axis\"/>\n", x,
                MT + PH, x, MT + PH + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, MT + PH + 20,
                v);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>\n", ML, MT + PH,
            ML + PW, MT + PH);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"label\">time since the decode "
               "phase began (s; bins of %.3g s)</text>\n",
            ML + PW / 2, H - 20, xmax / LOAD_SVG_BINS);
}

static void time_series(FILE *f, const double *v, const int *ok, double width, double xmax,
                        double ymax, const char *color, int dashed, int level, const char *unit)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", color,
            dashed ? "1.5" : "2.5", dashed ? " stroke-dasharray=\"6 4\"" : "");
    for (int b = 0, first = 1; b < LOAD_SVG_BINS; b++)
        if (ok[b]) {
            fprintf(f, "%s%.1f,%.1f", first ? "" : " ", lx((b + 0.5) * width, xmax), py(v[b], ymax));
            first = 0;
        }
    fputs("\"/>\n", f);
    for (int b = 0; b < LOAD_SVG_BINS; b++)
        if (ok[b])
            fprintf(f,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>%d sessions, %.2f s: "
                    "%.2f %s</title></circle>\n",
                    lx((b + 0.5) * width, xmax), py(v[b], ymax), dashed ? "2" : "3", color, level,
                    (b + 0.5) * width, v[b], unit);
}

static void sessions_legend(FILE *f, const load_sess_stats *lv, size_t n)
{
    size_t shown = n < 10 ? n : 10;
    int x = ML + 14, y = MT + 12, h = 46 + 16 * (int)shown;
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"250\" height=\"%d\" fill=\"white\" fill-opacity=\"0.85\" "
            "stroke=\"#999\"/>\n",
            x, y, h);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" stroke-width=\"2.5\"/>\n",
            x + 10, y + 15, x + 40, y + 15);
    fprintf(f, "<text x=\"%d\" y=\"%d\">decode tokens/s (left)</text>\n", x + 48, y + 19);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"6 4\"/>\n",
            x + 10, y + 31, x + 40, y + 31);
    fprintf(f, "<text x=\"%d\" y=\"%d\">mean time per token, ms (right)</text>\n", x + 48, y + 35);
    for (size_t i = 0; i < shown; i++) {
        int yy = y + 50 + 16 * (int)i;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"30\" height=\"8\" fill=\"%s\"/>\n", x + 10,
                yy - 4, palette[i % 10]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">%d sessions: %.1f tokens/s, p99 %.2f ms</text>\n", x + 48,
                yy + 4, lv[i].sessions, lv[i].decode_tokens_per_s, lv[i].tpot_p99_ms);
    }
}

void load_svg_sessions_print(FILE *f, const load_sess_stats *lv, size_t n, const char *subtitle)
{
    double xmax = 0, lmax = 0, rmax = 0;
    for (size_t i = 0; i < n; i++)
        if (lv[i].n_steps && lv[i].decode_elapsed_s > xmax) xmax = lv[i].decode_elapsed_s;
    double width = xmax > 0 ? xmax / LOAD_SVG_BINS : 1;
    double(*tps)[LOAD_SVG_BINS] = n ? calloc(n, sizeof *tps) : NULL;
    double(*tpot)[LOAD_SVG_BINS] = n ? calloc(n, sizeof *tpot) : NULL;
    int(*ok)[LOAD_SVG_BINS] = n ? calloc(n, sizeof *ok) : NULL;
    int have = xmax > 0 && tps && tpot && ok;
    for (size_t i = 0; have && i < n; i++) {
        bin_level(&lv[i], width, tps[i], tpot[i], ok[i]);
        for (int b = 0; b < LOAD_SVG_BINS; b++) {
            if (ok[i][b] && tps[i][b] > lmax) lmax = tps[i][b];
            if (ok[i][b] && tpot[i][b] > rmax) rmax = tpot[i][b];
        }
    }
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fputs("<style>.grid{stroke:#e4e4e4;stroke-width:1}.axis{stroke:#333;stroke-width:1}"
          ".label{font-size:14px}.title{font-size:18px;font-weight:bold}</style>\n",
          f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f,
            "<text x=\"%d\" y=\"30\" text-anchor=\"middle\" class=\"title\">attnd-load --sessions: decode "
            "tokens/s and time per token over time</text>\n",
            W / 2);
    if (subtitle) {
        fprintf(f, "<text x=\"%d\" y=\"52\" text-anchor=\"middle\" fill=\"#555\">", W / 2);
        put_escaped(f, subtitle);
        fputs("</text>\n", f);
    }
    if (have) {
        double sx = load_nice_step(xmax, 8), sl = load_nice_step(lmax * 1.1, 6);
        double sr = load_nice_step(rmax * 1.1, 6);
        double xm = sx * ceil(xmax / sx);
        double ymax_l = sl * ceil((lmax > 0 ? lmax * 1.1 : 1) / sl);
        double ymax_r = sr * ceil((rmax > 0 ? rmax * 1.1 : 1) / sr);
        linear_x_axis(f, xm, sx);
        y_axis(f, ymax_l, sl, 0, "decode tokens/s (all streams)", "#333");
        y_axis(f, ymax_r, sr, 1, "mean time per output token (ms)", "#333");
        for (size_t i = 0; i < n; i++) {
            const char *c = palette[i % 10];
            time_series(f, tps[i], ok[i], width, xm, ymax_l, c, 0, lv[i].sessions, "tokens/s");
            time_series(f, tpot[i], ok[i], width, xm, ymax_r, c, 1, lv[i].sessions, "ms per token");
        }
        sessions_legend(f, lv, n);
    } else {
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"label\">no successful decode "
                   "step</text>\n",
                W / 2, H / 2);
    }
    fputs("</svg>\n", f);
    free(tps);
    free(tpot);
    free(ok);
}

int load_svg_sessions_write(const char *path, const load_sess_stats *lv, size_t n,
                            const char *subtitle, char *err, size_t el)
{
    FILE *f = fopen(path, "w");
    if (!f) return snprintf(err, el, "--svg: cannot write %s", path), -1;
    load_svg_sessions_print(f, lv, n, subtitle);
    if (fclose(f) != 0) return snprintf(err, el, "--svg: cannot write %s", path), -1;
    return 0;
}
