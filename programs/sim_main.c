/* tandem-sim: replays a trace of request arrivals through the autoscale
 * policy with a cost model, and prints replicas over time, queueing delays
 * and cost per million tokens. See docs/AUTOSCALING.md ("Simulator"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autoscale/autoscale_sim.h"
#include "common/options.h"

typedef struct {
    sim_config cfg;
    char trace_path[OPT_PATH_MAX];
    double print_every_s; /* also print unchanged rows this often; 0 = changes only */
    int show_reasons;
} sim_cli;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tandem-sim --trace FILE.csv [options]\n"
            "\n"
            "Replays request arrivals (CSV: time_s,input_tokens,output_tokens) through the\n"
            "router's autoscale policy against a discrete-event model of the prefill and\n"
            "decode pools, and prints replicas over time, queueing delay percentiles and\n"
            "cost per million input/output tokens.\n"
            "\n"
            "  --trace FILE          the trace (required)\n"
            "  --print-every-s N     print a timeline row at least every N simulated seconds\n"
            "                        (default 60; rows are always printed when counts change)\n"
            "  --reasons             print the policy's reason for every printed row\n"
            "  --help                this text\n"
            "\n");
    sim_config_print_help(out);
}

/* The autoscale policy's and the cost model's flags (outside the table). */
static int set_sim_flag(void *ctx, const char *name, const char *value, char *err, size_t errlen)
{
    sim_cli *cli = ctx;
    int rc = value ? sim_config_set_flag(&cli->cfg, name, value, err, errlen) : -1;
    if (rc == 1) {
        snprintf(err, errlen, "unknown option --%s (see --help)", name);
        return -1;
    }
    return rc;
}

/* Accepts --name=value and --name value. */
static int parse_args(int argc, char **argv, sim_cli *cli)
{
    const opt_spec specs[] = {
        {"trace", OPT_STR, cli->trace_path, sizeof cli->trace_path, "the trace (required)"},
        {"print-every-s", OPT_DOUBLE, &cli->print_every_s, 0,
         "print a timeline row at least this often"},
        {"reasons", OPT_BOOL, &cli->show_reasons, 0, "print the policy's reasons"},
    };
    const opts_cli ocli = {specs, (int)(sizeof specs / sizeof *specs), set_sim_flag, cli,
                           "option"};
    char err[512];
    switch (opts_parse_cli(&ocli, argc, argv, err, sizeof err)) {
    case OPTS_HELP: usage(stdout); exit(0);
    case OPTS_ERROR: fprintf(stderr, "tandem-sim: %s\n", err); return -1;
    }
    if (!(cli->print_every_s >= 0.0)) {
        fprintf(stderr, "tandem-sim: --print-every-s: '%g' is not a number >= 0\n",
                cli->print_every_s);
        return -1;
    }
    if (!cli->trace_path[0]) {
        fprintf(stderr, "tandem-sim: --trace FILE is required (see --help)\n");
        return -1;
    }
    return 0;
}

static void print_percentiles(const char *what, const sim_percentiles *p)
{
    printf("%-34s p50 %9.3f  p90 %9.3f  p99 %9.3f  max %9.3f  mean %9.3f\n", what, p->p50, p->p90, p->p99, p->max,
           p->mean);
}

int main(int argc, char **argv)
{
    sim_cli cli;
    memset(&cli, 0, sizeof(cli));
    sim_config_default(&cli.cfg);
    cli.print_every_s = 60.0;
    if (parse_args(argc, argv, &cli) != 0)
        return 2;
    char err[512];
    if (sim_config_validate(&cli.cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "tandem-sim: %s\n", err);
        return 2;
    }
    sim_request *reqs = NULL;
    size_t n = 0;
    if (sim_load_trace(cli.trace_path, &reqs, &n, err, sizeof(err)) != 0) {
        fprintf(stderr, "tandem-sim: %s\n", err);
        return 1;
    }
    sim_result r;
    if (sim_run(&cli.cfg, reqs, n, &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "tandem-sim: %s\n", err);
        free(reqs);
        return 1;
    }
    const sim_config *c = &cli.cfg;
    printf("# trace %s: %zu requests, arrivals over %.1f s\n", cli.trace_path, n, reqs[n - 1].t);
    printf("# model: prefill %.0f tok/s per replica (%d GPUs); decode step %.4f + %.6f * batch s, at most %d running "
           "(%d GPUs); startup %.0f s; evaluation every %.1f s\n",
           c->prefill_tps, c->gpus_per_replica[AS_POOL_PREFILL], c->decode_step_base_s, c->decode_step_per_seq_s,
           c->decode_max_running, c->gpus_per_replica[AS_POOL_DECODE], c->startup_s, c->eval_interval_s);
    printf("%9s  %-22s  %-22s  %12s  %8s\n", "time_s", "prefill ready/cur->want", "decode ready/cur->want",
           "demand_tok/s", "dec_seqs");
    double last_print = -1e300;
    for (size_t i = 0; i < r.n_timeline; i++) {
        const sim_timeline_point *p = &r.timeline[i];
        int changed = i == 0 || p->desired[0] != p->current[0] || p->desired[1] != p->current[1] ||
                      p->ready[0] != r.timeline[i - 1].ready[0] || p->ready[1] != r.timeline[i - 1].ready[1];
        if (!changed && !(cli.print_every_s > 0.0 && p->t - last_print >= cli.print_every_s) && i + 1 != r.n_timeline)
            continue;
        char pre[32], dec[32];
        snprintf(pre, sizeof(pre), "%d/%d->%d", p->ready[0], p->current[0], p->desired[0]);
        snprintf(dec, sizeof(dec), "%d/%d->%d", p->ready[1], p->current[1], p->desired[1]);
        printf("%9.1f  %-22s  %-22s  %12.0f  %8ld\n", p->t, pre, dec, p->demand_tps, p->decode_sequences);
        if (cli.show_reasons)
            printf("           %s\n           %s\n", p->reason[0], p->reason[1]);
        last_print = p->t;
    }
    printf("\nsummary\n");
    printf("requests %zu, all served by %.1f s; input tokens %.0f, output tokens %.0f\n", r.n_requests, r.end_s,
           r.input_tokens, r.output_tokens);
    print_percentiles("prefill queue wait (s)", &r.prefill_wait);
    print_percentiles("time to first token (s)", &r.ttft);
    print_percentiles("decode admission wait (s)", &r.decode_wait);
    print_percentiles("inter-token latency (s, per req)", &r.itl);
    printf("replicas: prefill max %d (%d up, %d down), decode max %d (%d up, %d down)\n", r.max_ready[0],
           r.scale_ups[0], r.scale_downs[0], r.max_ready[1], r.scale_ups[1], r.scale_downs[1]);
    printf("gpu-hours: prefill %.4f, decode %.4f\n", r.gpu_seconds[0] / 3600.0, r.gpu_seconds[1] / 3600.0);
    printf("cost at $%.2f/GPU-hour: prefill $%.4f, decode $%.4f, total $%.4f\n", c->gpu_hour_usd, r.cost_usd[0],
           r.cost_usd[1], r.cost_usd[0] + r.cost_usd[1]);
    printf("cost per million input tokens (prefill pool): $%.4f\n", r.usd_per_m_input);
    printf("cost per million output tokens (decode pool): $%.4f\n", r.usd_per_m_output);
    sim_result_free(&r);
    free(reqs);
    return 0;
}
