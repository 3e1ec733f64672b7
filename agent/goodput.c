/* SPDX-License-Identifier: Apache-2.0
 * goodput.c: the agent's part `gp`, where the job's time goes. The owners of the moments feed it
 * (agent.c, group.c, hang.c, supervise.c); it reads the clock at those moments only (a beat
 * comes with its time), keeps goodput.h's record, and says each restart's cost as a
 * `restart_cost` event and the job's goodput as one line at the end. It calls nothing back. */
#include "agent_int.h"

#include <errno.h>
#include <jansson.h>

#include "ddp_log.h"
#include "ddp_time.h"

/* A part's time for the event: ms, or null when not known. */
static json_t *part_json(int64_t ms) {
    return ms < 0 ? json_null() : json_integer((json_int_t)ms);
}

/* The `restart_cost` event of a closed restart. */
static void cost_say(agent_t *a, const agent_goodput_cost_t *c) {
    int64_t lost = 0;
    for (int p = 0; p < AGENT_GP_NPARTS; p++)
        lost += c->ms[p] > 0 ? c->ms[p] : 0;
    agent__evlog(a, "restart_cost", "{s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "restart",
                 c->number, "lost_ms", (json_int_t)lost, "detect_ms",
                 part_json(c->ms[AGENT_GP_DETECT]), "stop_ms", part_json(c->ms[AGENT_GP_STOP]),
                 "rendezvous_ms", part_json(c->ms[AGENT_GP_RENDEZVOUS]), "start_ms",
                 part_json(c->ms[AGENT_GP_START]), "redo_ms", part_json(c->ms[AGENT_GP_REDO]),
                 "failed_step", part_json(c->failed_step));
}

void agent__goodput_begin(agent_t *a) {
    agent_goodput_init(&a->gp, ddp_now_ms(), a->cfg.job->heartbeat_timeout_ms > 0);
}

void agent__goodput_spawn(agent_t *a) {
    agent_goodput_cost_t c;
    if (agent_goodput_spawn(&a->gp, ddp_now_ms(), &c))
        cost_say(a, &c);
}

void agent__goodput_beat(agent_t *a, uint64_t t, long long step) {
    agent_goodput_cost_t c;
    if (agent_goodput_beat(&a->gp, t, (int64_t)step, &c))
        cost_say(a, &c);
}

void agent__goodput_failed(agent_t *a) {
    agent_goodput_cost_t c;
    if (agent_goodput_failed(&a->gp, ddp_now_ms(), &c))
        cost_say(a, &c);
}

void agent__goodput_down(agent_t *a) {
    agent_goodput_down(&a->gp, ddp_now_ms());
}

void agent__goodput_end(agent_t *a, int summarized) {
    agent_goodput_cost_t c;
    if (agent_goodput_end(&a->gp, ddp_now_ms(), &c))
        cost_say(a, &c);
    /* A job that never started a group (a spare, an unfit node) has nothing to say. */
    if (summarized || a->gp.groups == 0)
        return;
    char line[512];
    agent__goodput_text(a, line, sizeof line);
    if (a->gp.restarts > 0)
        DDP_WARN("%s", line);
    else
        DDP_INFO("%s", line);
}

int agent__goodput_watching(const agent_t *a) {
    const agent_goodput_t *g = &a->gp;
    return g->running && (g->first_ms == 0 || (g->open && g->pass_ms == 0));
}

void agent__goodput_text(agent_t *a, char *out, size_t cap) {
    agent_goodput_line(&a->gp, ddp_now_ms(), out, cap);
}

/* ratio (0..1) to four decimals, without libm: the wheel's programs need only libc. */
static double ratio_4dp(double ratio) {
    return (double)(int64_t)(ratio * 10000.0 + 0.5) / 10000.0;
}

struct json_t *agent__goodput_json(agent_t *a) {
    const agent_goodput_t *g = &a->gp;
    agent_goodput_totals_t t;
    agent_goodput_totals(g, ddp_now_ms(), &t);
    int known = g->beats && g->beaten;
    /* Four decimals of the ratio are the summary's one decimal of percent and some to spare. */
    return json_pack("{s:I, s:o, s:o, s:I, s:i}", "wall_ms", (json_int_t)t.wall_ms, "productive_ms",
                     known ? json_integer((json_int_t)t.productive_ms) : json_null(), "ratio",
                     known ? json_real(ratio_4dp(t.ratio)) : json_null(), "lost_ms",
                     (json_int_t)t.lost_ms, "restarts", g->restarts);
}

int agent__goodput_so_far(agent_t *a, agent_goodput_totals_t *t, int *restarts) {
    if (!a->gp.beats || !a->gp.beaten)
        return -ENOENT;
    agent_goodput_totals(&a->gp, ddp_now_ms(), t);
    *restarts = a->gp.restarts;
    return 0;
}
