/* quota_cmd.c — the grant of a quota lease on the wire (quota_cmd.h). */
#include "redis/quota_cmd.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

const pt_script *pt_quota_script(const pt_call *call) {
    porteiro_algorithm a = call->limits[0].algorithm;
    for (size_t i = 1; i < call->nlimits; i++)
        if (call->limits[i].algorithm != a)
            return &pt_scripts[PT_SCRIPT_ALL];
    return &pt_scripts[a];
}

void pt_command_quota(pt_quota_command *qc, const pt_call *call, const pt_quota_ask *ask,
                      bool by_sha) {
    pt_command *cmd = &qc->cmd;
    pt_args a = {&cmd->argc, cmd->argv, cmd->argvlen, cmd->numbers};
    cmd->argc = 0;
    pt_args_script(a, pt_quota_script(call), by_sha);
    pt_args_int(a, (long long)call->nlimits);
    for (size_t i = 0; i < call->nlimits; i++)
        pt_args_add(a, call->keys[i], call->key_lens[i]);
    if (call->now_ms == PORTEIRO_NOW)
        pt_args_add(a, "", 0); /* the script reads Redis TIME */
    else
        pt_args_int(a, call->now_ms);
    bool named = ask->back > 0 && ask->master[0] != '\0';
    int len = snprintf(qc->op, sizeof(qc->op), "q%lld:%lld:%lld:%lld%s%.*s", (long long)ask->cost,
                       (long long)ask->want, (long long)ask->back, (long long)ask->t0,
                       named ? ":" : "", named ? PT_QUOTA_MASTER_LEN : 0, ask->master);
    pt_args_add(a, qc->op, (size_t)len);
    for (size_t i = 0; i < call->nlimits; i++) {
        const porteiro_limit *l = &call->limits[i];
        pt_args_int(a, l->algorithm);
        pt_args_int(a, l->limit);
        pt_args_int(a, l->period_ms);
        pt_args_int(a, l->burst);
    }
}

void pt_command_wait(pt_command *cmd, int64_t replicas, int64_t timeout_ms) {
    pt_args a = {&cmd->argc, cmd->argv, cmd->argvlen, cmd->numbers};
    cmd->argc = 0;
    pt_args_add(a, "WAIT", 4);
    pt_args_int(a, (long long)replicas);
    pt_args_int(a, (long long)timeout_ms);
}

int64_t pt_reply_wait(const redisReply *reply) {
    return reply != NULL && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
}

void pt_quota_to_module(pt_quota_command *qc) {
    pt_command *cmd = &qc->cmd;
    cmd->argv[0] = "porteiro.lease";
    cmd->argvlen[0] = strlen(cmd->argv[0]);
    for (int i = 2; i < cmd->argc; i++) { /* the script's name goes */
        cmd->argv[i - 1] = cmd->argv[i];
        cmd->argvlen[i - 1] = cmd->argvlen[i];
    }
    cmd->argc--;
}

/* A replication id as Redis writes it: hex digits, at most 40. */
static bool master_id(const redisReply *r, char *out) {
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)
        return false;
    if (r->len > PT_QUOTA_MASTER_LEN)
        return false;
    for (size_t i = 0; i < r->len; i++)
        if (!isxdigit((unsigned char)r->str[i]))
            return false;
    memcpy(out, r->str, r->len);
    out[r->len] = '\0';
    return true;
}

porteiro_status pt_reply_quota(const redisReply *reply, const pt_call *call,
                               const pt_quota_ask *ask, porteiro_decision *d, pt_quota_reply *q,
                               char *errbuf, size_t errlen) {
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(errbuf, errlen, "redis: %.*s", (int)reply->len, reply->str);
        return pt_reply_error_status(reply);
    }
    size_t n = call->nlimits * 5;
    *q = (pt_quota_reply){0};
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n + 3 ||
        reply->element[n]->type != REDIS_REPLY_INTEGER ||
        reply->element[n + 1]->type != REDIS_REPLY_INTEGER ||
        !master_id(reply->element[n + 2], q->master)) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the quota lease script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    memset(d, 0, sizeof(*d));
    porteiro_status st = pt_reply_results(reply->element, call, d, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    q->granted = reply->element[n]->integer;
    q->now_ms = reply->element[n + 1]->integer;
    int64_t most = ask->want > ask->cost ? ask->want : ask->cost;
    bool back_only = ask->cost == 0; /* nothing taken: the limits as they stand */
    if ((!back_only && d->allowed != (q->granted > 0)) || (back_only && q->granted != 0) ||
        (q->granted > 0 && (q->granted < ask->cost || q->granted > most)) || q->now_ms < 0 ||
        d->wait_ms != 0) {
        snprintf(errbuf, errlen,
                 "redis: the quota lease script's reply contradicts itself "
                 "(granted %lld)",
                 (long long)q->granted);
        return PORTEIRO_ERR_PROTOCOL;
    }
    return PORTEIRO_OK;
}
