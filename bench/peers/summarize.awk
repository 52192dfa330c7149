#!/usr/bin/awk -f
# summarize.awk — the table of bench/run.sh peers from its raw rows:
#   pipeline round name algorithm pair ops_per_sec p50_us p99_us allowed denied
#   script_us (Redis's time inside EVAL/EVALSHA per decision, µs)
# Per (pipeline, contestant): the median of each number over the rounds, and
# ratios as the median of per-round ratios (both sides measured in one round,
# minutes apart at most, so machine noise cancels better than in a ratio of
# medians). Plain POSIX awk (mawk has no asort).

function median(list, n,    a, i, j, t, k) {
    # list is "v1 v2 ...": sort a copy by insertion (n is a handful of rounds).
    k = split(list, a, " ")
    if (k == 0) return ""
    for (i = 2; i <= k; i++) {
        t = a[i] + 0
        for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
        a[j + 1] = t
    }
    return (k % 2) ? a[(k + 1) / 2] + 0 : (a[k / 2] + a[k / 2 + 1]) / 2
}

# Appends v to the space-separated list arr[key] (the lvalue exists before
# the right side runs in mawk, so an "in" test there would always be true).
function add(arr, key, v,    had) { had = (key in arr); arr[key] = had ? arr[key] " " v : v }

function fmt_ratio(list) { return list == "" ? "-" : sprintf("%.2f", median(list)) }

function fmt_num(list) { return list == "" ? "-" : sprintf("%d", median(list) + 0.5) }

BEGIN { FS = "\t" }

$6 != "" {
    p = $1; r = $2; id = $3 "\t" $4
    if (!((p, id) in seen)) {
        seen[p, id] = 1
        norder[p]++
        order[p] = (norder[p] > 1) ? order[p] SUBSEP id : id
    }
    if (!(p in pseen)) { pseen[p] = 1; plist[++np] = p }
    add(ops, p SUBSEP id, $6); add(p50, p SUBSEP id, $7); add(p99, p SUBSEP id, $8)
    if ($11 != "") add(script, p SUBSEP id, $11)
    if ($9 != "-" && $9 + $10 > 0) add(denied, p SUBSEP id, 100 * $10 / ($9 + $10))
    round_ops[p, r, id] = $6; round_p50[p, r, id] = $7
    pair[p, id] = $5
    rounds[p, r] = 1
    if (r + 0 > maxr[p] + 0) maxr[p] = r + 0
}

function print_pipeline(p,    ids, n, i, id, name, alg, r, vs_p, vs_p50, vs_c, pid, cid) {
    n = split(order[p], ids, SUBSEP)
    printf "\npipeline %s: medians over rounds; ratios are medians of per-round ratios\n", p
    printf "%-28s %-13s %8s %7s %7s %7s %9s %12s %12s %11s\n", "contestant", "algorithm", "ops/s",
        "p50_us", "p99_us", "denied%", "script_us", "ops/porteiro", "p50/porteiro", "ops/ceiling"
    for (pass = 0; pass < 3; pass++) {
        for (i = 1; i <= n; i++) {
            id = ids[i]; split(id, part, "\t"); name = part[1]; alg = part[2]
            kind = (name == "porteiro") ? 0 : (name == "redis-benchmark") ? 2 : 1
            if (kind != pass) continue
            vs_p = ""; vs_p50 = ""; vs_c = ""
            pid = "porteiro\t" pair[p, id]; cid = "redis-benchmark\tceiling"
            for (r = 1; r <= maxr[p]; r++) {
                if (!((p, r) in rounds)) continue
                if (kind == 1 && (p, r, pid) in round_ops && (p, r, id) in round_ops) {
                    add(tmp_p, 1, round_ops[p, r, id] / round_ops[p, r, pid])
                    if (round_p50[p, r, pid] > 0)
                        add(tmp_l, 1, round_p50[p, r, id] / round_p50[p, r, pid])
                }
                if (kind != 2 && (p, r, cid) in round_ops && (p, r, id) in round_ops)
                    add(tmp_c, 1, round_ops[p, r, id] / round_ops[p, r, cid])
            }
            vs_p = (1 in tmp_p) ? tmp_p[1] : ""; vs_p50 = (1 in tmp_l) ? tmp_l[1] : ""
            vs_c = (1 in tmp_c) ? tmp_c[1] : ""
            delete tmp_p; delete tmp_l; delete tmp_c
            printf "%-28s %-13s %8s %7s %7s %7s %9s %12s %12s %11s\n", name, alg,
                fmt_num(ops[p, id]), fmt_num(p50[p, id]), fmt_num(p99[p, id]),
                ((p, id) in denied) ? sprintf("%.1f", median(denied[p, id])) : "-",
                ((p, id) in script) ? sprintf("%.1f", median(script[p, id])) : "-",
                fmt_ratio(vs_p), fmt_ratio(vs_p50), fmt_ratio(vs_c)
        }
    }
}

END {
    if (np == 0) { print "no measurements"; exit 1 }
    for (k = 1; k <= np; k++) print_pipeline(plist[k])
}
