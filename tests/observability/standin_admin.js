// standin_admin.js — a stand-in for porteirod's admin listener (the JSON
// contract of docs/observability.md) with made-up, moving numbers: to work
// on daemon/admin/page.html and `porteiro top` without a porteirod.
//   node standin_admin.js PORT     (POST /redis/down, /redis/up flip node 1)
"use strict";
const http = require("http");
const fs = require("fs");
const path = require("path");

const page = path.join(__dirname, "..", "..", "daemon", "admin", "page.html");
const start = Date.now();
const policies = { api: { allowed: 0, denied: 0, fallback: 0 }, web: { allowed: 0, denied: 0, fallback: 0 } };
let redisUp = true;
const latency = { bounds_us: [50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000],
                  counts: new Array(12).fill(0), sum_us: 0 };
setInterval(() => {
  const t = (Date.now() - start) / 1000;
  policies.api.allowed += Math.round(800 + 300 * Math.sin(t / 20));
  policies.api.denied += Math.round(120 + 100 * Math.sin(t / 7));
  policies.web.allowed += 300;
  policies.web.denied += 5;
  if (!redisUp) { policies.api.fallback += 900; policies.web.fallback += 305; }
  const spread = [5, 60, 400, 300, 150, 40, 10, 3, 1, 0, 0, 0];
  spread.forEach((v, i) => { latency.counts[i] += v; latency.sum_us += v * (latency.bounds_us[i] || 150000) * 0.7; });
}, 100);

function json(res, code, body) {
  res.writeHead(code, { "Content-Type": "application/json" });
  res.end(JSON.stringify(body));
}
http.createServer((req, res) => {
  const u = new URL(req.url, "http://x");
  if (req.method === "POST" && u.pathname === "/redis/down") { redisUp = false; return json(res, 200, {}); }
  if (req.method === "POST" && u.pathname === "/redis/up") { redisUp = true; return json(res, 200, {}); }
  if (u.pathname === "/") {
    res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    return res.end(fs.readFileSync(page));
  }
  if (u.pathname === "/v1/status") {
    return json(res, 200, {
      version: "0.1.0-standin", uptime_s: Math.floor((Date.now() - start) / 1000), now_ms: Date.now(),
      config: { path: "/etc/porteiro/porteirod.yaml", loaded_at_ms: start, reloads: 2, last_error: null },
      policies: Object.keys(policies).map((p) => Object.assign({ policy: p }, policies[p])),
      redis: [{ node: "127.0.0.1:6379", up: redisUp, breaker: redisUp ? "closed" : "open", decides: "module" },
              { node: "127.0.0.1:6380", up: true, breaker: "closed", decides: "scripts" }],
      latency,
    });
  }
  if (u.pathname === "/v1/top") {
    const outcome = u.searchParams.get("outcome") || "denied";
    const n = Number(u.searchParams.get("n") || 10);
    const keys = [];
    for (let i = 0; i < n; i++)
      keys.push({ key: i === 0 ? "user:hot" : "user:" + (1000 + i * 37), count: Math.round(6000 / (i + 1)), error: i < 3 ? 0 : 12 });
    return json(res, 200, { window: u.searchParams.get("window") || "1m", outcome, k: 64, show: "raw",
      policies: [{ policy: "api", total: 20000, error_bound: 312, keys },
                 { policy: "web", total: 300, error_bound: 4, keys: keys.slice(0, 2).map((k) => ({ key: "10.0.0." + k.count % 250, count: Math.round(k.count / 50), error: 0 })) }] });
  }
  json(res, 404, { error: "not found" });
}).listen(Number(process.argv[2] || 9901), "127.0.0.1");
