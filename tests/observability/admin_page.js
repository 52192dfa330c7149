// admin_page.js — porteirod's admin page (daemon/admin/page.html) in a real
// browser: Debian's chromium, headless, driven by playwright-core, against a
// real porteirod under load with a real redis-server behind it.
//
//   - the hot denied key is in the top table within 2 s of opening the page;
//   - the decision charts and the latency histogram draw (pixels on the
//     canvas, not only a call); then, on a second page whose clock the test
//     moves a second at a time, each point of the allowed, denied and
//     fallback lines and each bar of the histogram is where the numbers
//     /v1/status served put it (not only the grid and the axis labels);
//   - the Redis node turns red within 2 s of Redis dying (kill -9), and
//     green again after it restarts;
//   - tokens (issue 38): a policy whose requests settle shows its debt (the
//     units charged past empty, as /v1/status and /metrics count them), and
//     the top table's "used (tokens)" view ranks keys by the units their
//     settles reported, the heaviest first, with its exact count;
//   - no console error, no uncaught exception, no failed request;
//   - a screenshot, to $SCREENSHOT when set (docs/img/admin_page.png).
//
// Env: PORTEIROD (the binary), CHROMIUM (default /usr/bin/chromium),
// SCREENSHOT (optional). Exit 0 pass, 1 fail (admin_page_test.sh decides
// whether a missing chromium is a skip).
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const http = require("http");
const net = require("net");
const os = require("os");
const path = require("path");

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const PORTEIROD = process.env.PORTEIROD;
const HOT_KEY = "user:hot";
const children = [];
let tmp = null;

function log(msg) { process.stderr.write(`admin_page: ${msg}\n`); }
function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// A port the kernel just handed out on loopback.
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

function start(cmd, args, name) {
  const out = fs.openSync(path.join(tmp, name + ".log"), "a");
  const child = spawn(cmd, args, { stdio: ["ignore", out, out], cwd: tmp });
  children.push(child);
  return child;
}
function stop(child, sig) {
  if (child && child.exitCode === null && child.signalCode === null) child.kill(sig || "SIGTERM");
}
function exited(child, ms) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    child.once("exit", () => { clearTimeout(t); resolve(true); });
  });
}

function redisPing(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let got = "";
    s.setTimeout(300, () => { s.destroy(); resolve(false); });
    s.on("connect", () => s.write("PING\r\n"));
    s.on("data", (d) => { got += d; if (got.includes("\r\n")) { s.destroy(); resolve(got.startsWith("+PONG")); } });
    s.on("error", () => resolve(false));
  });
}
async function startRedis(port) {
  const r = start("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", tmp], "redis");
  for (let i = 0; i < 100; i++) {
    if (await redisPing(port)) return r;
    await sleep(50);
  }
  throw new Error(`redis-server did not answer on port ${port}`);
}

function request(port, method, p, body, agent) {
  return new Promise((resolve) => {
    const req = http.request({ host: "127.0.0.1", port, method, path: p, agent,
                               headers: body ? { "Content-Type": "application/json" } : {} }, (res) => {
      let data = "";
      res.on("data", (d) => { data += d; });
      res.on("end", () => resolve({ status: res.statusCode, body: data }));
    });
    req.setTimeout(2000, () => req.destroy());
    req.on("error", () => resolve({ status: 0, body: "" }));
    if (body) req.write(body);
    req.end();
  });
}

// Load, on a few keep-alive connections until stopped: on api, one hot key
// far over its limit (a quarter of the checks), a few warm keys over it too,
// 500 cold keys under it; on web, three clients near their limit.
const WARM = ["tenant:acme", "user:4242", "203.0.113.7", "user:1337", "svc:batch-exporter"];
function loadLoop(port) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  let running = true, sent = 0;
  const worker = async (w) => {
    for (let i = 0; running; i++) {
      let policy = "api", key;
      switch (i % 4) {
        case 0: key = HOT_KEY; break;
        case 1: key = WARM[(w + i) % WARM.length]; break;
        case 2: key = `user:${(w * 7919 + i) % 500}`; break;
        default: policy = "web"; key = `198.51.100.${(w + i) % 3}`;
      }
      await request(port, "POST", "/v1/check", JSON.stringify({ policy, key }), agent);
      sent++;
      if (i % 50 === 0) await sleep(5); // leave the two cores to the rest
    }
  };
  const done = Promise.all([0, 1, 2, 3].map(worker));
  return { stop: async () => { running = false; await done; agent.destroy(); }, sent: () => sent };
}

async function startPorteirod(redisPort) {
  const port = await freePort(), admin = await freePort();
  const config = path.join(tmp, "porteirod.yaml");
  fs.writeFileSync(config, [
    `listen: 127.0.0.1:${port}`,
    "admin:",
    `  listen: 127.0.0.1:${admin}`,
    "redis:",
    `  url: redis://127.0.0.1:${redisPort}`,
    "  timeout_ms: 100",
    "  breaker_failures: 3",
    "  breaker_cooldown_ms: 200",
    "policies:",
    "  api:",
    "    limits:",
    "      - fixed_window 20/1s",
    "  web:",
    "    limits:",
    "      - gcra 100/1s",
    "  llm:",
    "    limits:",
    "      - token_bucket 1000/1m",
    "",
  ].join("\n"));
  const d = start(PORTEIROD, ["--config", config], "porteirod");
  for (let i = 0; i < 100; i++) {
    const r = await request(admin, "GET", "/v1/status");
    if (r.status === 200) return { d, port, admin };
    if (d.exitCode !== null) break;
    await sleep(50);
  }
  throw new Error("porteirod's admin listener did not answer; its log:\n" +
                  fs.readFileSync(path.join(tmp, "porteirod.log"), "utf8"));
}

// Pixels drawn on a canvas that are not the background: 0 for a blank one.
async function inkOn(page, selector) {
  return page.$eval(selector, (c) => {
    const g = c.getContext("2d");
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) ink++;
    return ink;
  });
}

// The page's scale: the largest value's nice ceiling (1, 2 or 5 x 10^n).
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const step of [1, 2, 5, 10]) if (v <= step * p) return step * p;
  return 10 * p;
}

// The charts against the numbers served. A page on a paused clock (the
// context's clock: after every timing check) polls once when it opens and
// once per clock.runFor(1000), so the page's history holds each /v1/status
// answer (captured here) exactly 1 s apart. Real time between the polls
// varies, so the rates do. Then, in the canvases' pixels:
//   - rates: each point of each line (allowed, denied, fallback) of each
//     policy has its colour within 2 px of where that answer's rate puts it
//     (x: its age in the 60 s span; y: its share of the nice ceiling of the
//     largest rate), unless a line drawn later covers that spot;
//   - the histogram: each bucket's bar (the counts of the last answer minus
//     the first's) reaches the height its count gives, and an empty bucket
//     has no bar.
// Returns the problems found ([] when the charts are right).
async function checkChartsAgainstServed(browser, admin) {
  const page = await browser.newPage();
  const served = [];
  page.on("response", (r) => {
    if (new URL(r.url()).pathname === "/v1/status") served.push(r.json());
  });
  const T0 = Date.UTC(2030, 0, 1, 12, 0, 0);
  await page.clock.install({ time: T0 });
  await page.clock.pauseAt(T0 + 1000);
  await page.goto(`http://127.0.0.1:${admin}/`);
  // Asked from here: the page's own timers (waitForFunction's polling) are
  // the paused clock's.
  const polled = async (n) => {
    for (const end = Date.now() + 10000; Date.now() < end; await sleep(20))
      if (Number(await page.evaluate(() => document.body.dataset.polls || 0)) >= n) return;
    throw new Error(`the page on a paused clock did not finish poll ${n} within 10 s`);
  };
  await polled(1);
  const gaps = [300, 100, 700, 200, 500, 150]; // real ms between polls
  for (let i = 0; i < gaps.length; i++) {
    await sleep(gaps[i]);
    await page.clock.runFor(1000);
    await polled(i + 2);
  }
  const history = await Promise.all(served);
  const K = gaps.length + 1;
  if (history.length !== K) throw new Error(`${history.length} /v1/status answers for ${K} polls`);

  const shot = await page.evaluate(() => {
    const css = getComputedStyle(document.documentElement);
    const grab = (c) => { // the RGBA bytes as base64: an array of numbers is slow to pass
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let bin = "";
      for (let i = 0; i < d.length; i += 0x8000) bin += String.fromCharCode.apply(null, d.subarray(i, i + 0x8000));
      return { w: c.clientWidth, h: c.clientHeight, bw: c.width, bh: c.height, drawn: c.dataset.drawn, px: btoa(bin) };
    };
    const charts = {};
    for (const c of document.querySelectorAll("canvas.rate-chart")) charts[c.dataset.policy] = grab(c);
    const color = (n) => css.getPropertyValue(n).trim();
    return { ratio: window.devicePixelRatio || 1, charts, latency: grab(document.getElementById("latency-chart")),
             colors: { allowed: color("--allowed"), denied: color("--denied"), fallback: color("--fallback"),
                       accent: color("--accent") } };
  });
  await page.close();

  for (const img of [shot.latency, ...Object.values(shot.charts)]) img.px = Buffer.from(img.px, "base64");
  const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const colors = {};
  for (const [k, v] of Object.entries(shot.colors)) colors[k] = rgb(v);
  const r = shot.ratio;
  const isColor = (img, x, y, want) => {
    x = Math.round(x); y = Math.round(y);
    if (x < 0 || y < 0 || x >= img.bw || y >= img.bh) return false;
    const i = 4 * (y * img.bw + x), d = img.px;
    return d[i + 3] >= 128 &&
      Math.abs(d[i] - want[0]) + Math.abs(d[i + 1] - want[1]) + Math.abs(d[i + 2] - want[2]) <= 60;
  };
  const near = (img, x, y, want, radius) => { // x, y in CSS pixels
    for (let dy = -radius * r; dy <= radius * r; dy++)
      for (let dx = -radius * r; dx <= radius * r; dx++)
        if (isColor(img, x * r + dx, y * r + dy, want)) return true;
    return false;
  };
  const problems = [];
  let checked = 0, covered = 0;

  // Rates: as the page makes them, from consecutive answers 1 s apart.
  const SERIES = ["fallback", "allowed", "denied"]; // drawing order: denied on top
  for (const [policy, img] of Object.entries(shot.charts)) {
    const pts = [];
    for (let i = 1; i < K; i++) {
      const a = history[i - 1].policies.find((p) => p.policy === policy);
      const b = history[i].policies.find((p) => p.policy === policy);
      if (!a || !b) continue;
      const p = { age: K - 1 - i };
      let ok = true;
      for (const k of SERIES) { p[k] = (b[k] || 0) - (a[k] || 0); if (p[k] < 0) ok = false; }
      if (ok) pts.push(p);
    }
    if (Number(img.drawn) !== pts.length)
      problems.push(`${policy} chart: data-drawn ${img.drawn}, ${pts.length} points served`);
    let max = 1;
    for (const p of pts) max = Math.max(max, p.allowed, p.denied, p.fallback);
    max = niceCeil(max);
    const S = 60, padL = 44, w = img.w - padL - 4, h = img.h - 16 - 6;
    for (const p of pts) {
      const x = padL + w - w * p.age / S;
      const y = {};
      for (const k of SERIES) y[k] = 6 + h - h * p[k] / max;
      SERIES.forEach((k, n) => {
        if (near(img, x, y[k], colors[k], 2)) { checked++; return; }
        // A line drawn after this one may cover the spot: no verdict there.
        if (SERIES.slice(n + 1).some((later) => near(img, x, y[k], colors[later], 2))) { covered++; return; }
        problems.push(`${policy} chart: no ${k} line at ${p.age} s ago, where ${p[k]}/s ` +
                      `(of a ${max}/s scale) puts it: (${x.toFixed(1)}, ${y[k].toFixed(1)})`);
      });
    }
  }
  if (!shot.charts.api) problems.push("no api chart");
  if (checked < 2 * covered || checked < 3 * (K - 1))
    problems.push(`the lines were seen at only ${checked} points (${covered} covered by another line)`);

  // The histogram: the last answer's counts minus the first's.
  const first = history[0].latency, last = history[K - 1].latency, img = shot.latency;
  const counts = last.counts.map((v, k) => { const d = v - first.counts[k]; return d < 0 ? v : d; });
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) problems.push("no Redis round trips between the first and the last poll");
  if (Number(img.drawn) !== total) problems.push(`histogram: data-drawn ${img.drawn}, ${total} served`);
  const bw = img.w / counts.length, h = img.h - 18 - 18, cmax = Math.max(1, ...counts);
  counts.forEach((v, k) => {
    const x = Math.round((k * bw + bw / 2) * r);
    let top = -1, bottom = -1;
    for (let y = 0; y < img.bh; y++)
      if (isColor(img, x, y, colors.accent)) { if (top < 0) top = y; bottom = y; }
    const wantTop = (18 + h - (v > 0 ? Math.max(h * v / cmax, 1) : 0)) * r, wantBottom = (18 + h) * r;
    if (v === 0 && top >= 0) problems.push(`histogram: bucket ${k} is empty but has a bar from y ${top / r}`);
    if (v > 0 && (top < 0 || Math.abs(top - wantTop) > 1.5 * r || Math.abs(bottom + 1 - wantBottom) > 1.5 * r))
      problems.push(`histogram: bucket ${k} (${v} of ${total}) wants a bar from y ${(wantTop / r).toFixed(1)} ` +
                    `to ${wantBottom / r}, drawn ${top < 0 ? "none" : `from ${top / r} to ${(bottom + 1) / r}`}`);
  });
  log(`charts against the numbers served: ${checked} line points where their rates put them ` +
      `(${covered} covered), ${counts.filter((v) => v > 0).length} bars of ${counts.length} ` +
      `(${total} round trips)`);
  return problems;
}

// Tokens on llm (POST /v1/check with the estimate, POST /v1/settle with
// what was used): tenant:heavy uses 3000 of an estimate of 100 (debt past
// the bucket of 1000), tenant:light twice 50 of 100. Returns the units each
// used, and checks the answers.
const TOKENS = { "tenant:heavy": [3000], "tenant:light": [50, 50] };
async function settleTokens(port) {
  for (const [key, uses] of Object.entries(TOKENS))
    for (const used of uses) {
      const c = await request(port, "POST", "/v1/check", JSON.stringify({ policy: "llm", key, cost: 100 }));
      if (c.status !== 200) throw new Error(`llm check of ${key}: HTTP ${c.status} ${c.body}`);
      const s = await request(port, "POST", "/v1/settle",
                              JSON.stringify({ policy: "llm", key, estimate: 100, used }));
      if (s.status !== 200) throw new Error(`llm settle of ${key}: HTTP ${s.status} ${s.body}`);
    }
}

async function main() {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} not found`);
  if (!PORTEIROD) throw new Error("PORTEIROD is not set");
  const { chromium } = require("./browser/node_modules/playwright-core");
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "porteiro-admin-page-"));

  const redisPort = await freePort();
  let redis = await startRedis(redisPort);
  const { d, port, admin } = await startPorteirod(redisPort);
  await settleTokens(port);
  const load = loadLoop(port);
  await sleep(1500); // a second of load before the page opens

  // A fresh profile (--user-data-dir) in the test's folder.
  const browser = await chromium.launchPersistentContext(path.join(tmp, "chromium"), {
    executablePath: CHROMIUM, headless: true, viewport: { width: 1280, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const problems = [];
  try {
    const page = browser.pages()[0] || await browser.newPage();
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
    page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
    page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure() && r.failure().errorText}`));
    page.on("response", (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });

    // When things appear, by the page's own clock (Date.now() is the same
    // system clock as ours): a MutationObserver notes the first time each
    // selector matches. Playwright's polling, slow on a loaded machine,
    // is kept out of the measure.
    await page.addInitScript((sel) => {
      window.__seen = {};
      const look = () => {
        for (const [name, css] of Object.entries(sel))
          if (!window.__seen[name] && document.querySelector(css)) window.__seen[name] = Date.now();
        if (window.__seen.down && !window.__seen.upAgain && document.querySelector(sel.up))
          window.__seen.upAgain = Date.now();
      };
      document.addEventListener("DOMContentLoaded", () => {
        window.__seen.opened = Date.now();
        new MutationObserver(look).observe(document.body, { subtree: true, childList: true, attributes: true });
        look();
      });
    }, { hot: `#top-body tr[data-policy="api"][data-key="${HOT_KEY}"]`,
         down: '#redis-nodes .node[data-state="down"]', up: '#redis-nodes .node[data-state="up"]' });
    const seen = async (name, ms, what) => {
      try {
        await page.waitForFunction((n) => window.__seen && window.__seen[n], name, { timeout: ms });
      } catch (e) {
        throw new Error(`${what}: never seen within ${ms} ms`);
      }
      return page.evaluate(() => window.__seen);
    };

    await page.goto(`http://127.0.0.1:${admin}/`);
    let t = await seen("hot", 10000, "the hot denied key in the top table");
    log(`hot key shown ${t.hot - t.opened} ms after the page opened (first poll ` +
        `${await page.$eval("body", (b) => b.dataset.pollMs)} ms)`);
    if (t.hot - t.opened > 2000) throw new Error(`the hot key took ${t.hot - t.opened} ms to show (over 2 s)`);
    const first = await page.$eval("#top-body tr", (tr) => tr.dataset.key);
    if (first !== HOT_KEY) throw new Error(`the first row is ${first}, not the hot key`);

    // Charts: after a few polls, lines on the api chart and bars on the histogram.
    await page.waitForFunction(() => {
      const c = document.querySelector('canvas[data-policy="api"]');
      return c && Number(c.dataset.drawn) >= 3;
    }, null, { timeout: 6000 });
    const ink = await inkOn(page, 'canvas[data-policy="api"]');
    const bars = await inkOn(page, "#latency-chart");
    if (ink < 500) throw new Error(`the api chart is blank (${ink} pixels drawn)`);
    if (bars < 500) throw new Error(`the latency histogram is blank (${bars} pixels drawn)`);
    const node = await page.$eval("#redis-nodes .node", (n) => n.dataset.state);
    if (node !== "up") throw new Error(`the Redis node is ${node} before Redis died`);
    log(`charts drawn (${ink} and ${bars} pixels), node up`);

    // The selectors: the top allowed keys of the last 10 minutes, then back.
    await page.selectOption("#top-outcome", "allowed");
    await page.selectOption("#top-window", "10m");
    await page.waitForFunction(() => document.querySelector("#top-outcome-label").textContent === "allowed" &&
      document.querySelectorAll('#top-body tr[data-policy="web"]').length === 3, null, { timeout: 5000 });
    await page.selectOption("#top-outcome", "denied");
    await page.selectOption("#top-window", "1m");
    await page.waitForFunction((hot) => {
      const tr = document.querySelector("#top-body tr");
      return tr && tr.dataset.key === hot && document.querySelector("#top-outcome-label").textContent === "denied";
    }, HOT_KEY, { timeout: 5000 });

    // Tokens: llm's debt as /v1/status counts it, and the used view.
    const st = JSON.parse((await request(admin, "GET", "/v1/status")).body);
    const llm = st.policies.find((p) => p.policy === "llm");
    if (!llm || llm.settles !== 3 || !(llm.debt_units > 0))
      throw new Error(`/v1/status for llm: ${JSON.stringify(llm)}`);
    await page.waitForFunction((want) => {
      const d = document.querySelector('.policy[data-policy="llm"] .debt');
      return d && d.dataset.debt === String(want) && d.dataset.settles === "3" &&
        d.dataset.inDebt === "1" && d.offsetParent !== null && /debt/.test(d.textContent);
    }, llm.debt_units, { timeout: 5000 });
    const others = await page.$$eval('.policy:not([data-policy="llm"]) .debt',
                                     (ds) => ds.filter((d) => d.offsetParent !== null).length);
    if (others !== 0) throw new Error(`${others} policies without settles show a debt line`);
    await page.selectOption("#top-outcome", "used");
    await page.waitForFunction(() => {
      const rows = document.querySelectorAll('#top-body tr[data-policy="llm"]');
      return document.querySelector("#top-outcome-label").textContent === "used" && rows.length === 2 &&
        rows[0].dataset.key === "tenant:heavy" && rows[0].dataset.count === "3000" &&
        rows[1].dataset.key === "tenant:light" && rows[1].dataset.count === "100";
    }, null, { timeout: 5000 });
    log(`llm: ${llm.debt_units} units of debt shown; the used view ranks tenant:heavy (3000) first`);
    await page.selectOption("#top-outcome", "denied");
    await page.waitForFunction(() => document.querySelector("#top-outcome-label").textContent === "denied",
                               null, { timeout: 5000 });

    // Redis dies: red within 2 s.
    const killed = Date.now();
    stop(redis, "SIGKILL");
    await exited(redis, 2000);
    t = await seen("down", 10000, "the Redis node red after Redis died");
    log(`node red ${t.down - killed} ms after kill -9`);
    if (t.down - killed > 2000) throw new Error(`the node took ${t.down - killed} ms to turn red (over 2 s)`);
    const pill = await page.$eval("#status-pill", (p) => p.dataset.status);
    if (pill !== "redis_down") throw new Error(`the status says ${pill} with Redis down`);
    if (process.env.SCREENSHOT) await sleep(3000); // the dip and the fallback on the charts

    // Redis back: green.
    const restarted = Date.now();
    redis = await startRedis(redisPort);
    t = await seen("upAgain", 15000, "the Redis node green after Redis restarted");
    log(`node green ${t.upAgain - restarted} ms after the restart`);
    if (process.env.SCREENSHOT) await sleep(4000); // a few seconds of recovery on the charts

    if (process.env.SCREENSHOT) {
      await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
      log(`screenshot: ${process.env.SCREENSHOT}`);
    }
    log(`${load.sent()} checks sent`);

    // The charts against the numbers served, on a second page whose clock the
    // test moves (the context's clock: after every timing check above).
    await page.close();
    const began = Date.now();
    const wrong = await checkChartsAgainstServed(browser, admin);
    log(`(the chart check took ${Date.now() - began} ms)`);
    if (wrong.length) throw new Error("the charts do not show the numbers served:\n  " + wrong.join("\n  "));
  } finally {
    await browser.close();
    await load.stop();
  }
  if (problems.length) throw new Error("the page logged problems:\n  " + problems.join("\n  "));
  // porteirod stops cleanly, with no sanitizer report (an ASan build).
  stop(d, "SIGTERM");
  if (!(await exited(d, 10000))) throw new Error("porteirod did not stop within 10 s of SIGTERM");
  const dlog = fs.readFileSync(path.join(tmp, "porteirod.log"), "utf8");
  if (d.exitCode !== 0) throw new Error(`porteirod exited with ${d.exitCode} (${d.signalCode})`);
  if (/Sanitizer|runtime error/.test(dlog)) throw new Error("a sanitizer report in porteirod's log");
  return 0;
}

async function cleanup() {
  for (const c of children) stop(c, "SIGTERM");
  for (const c of children) if (!(await exited(c, 3000))) stop(c, "SIGKILL");
  if (tmp && !process.env.KEEP_TMP) fs.rmSync(tmp, { recursive: true, force: true });
}

main().then(async (code) => {
  await cleanup();
  if (code === 0) log("PASS");
  process.exit(code);
}, async (e) => {
  log(`FAIL: ${e.message}`);
  if (tmp) {
    const l = path.join(tmp, "porteirod.log");
    if (fs.existsSync(l)) log("porteirod's log (tail):\n" + fs.readFileSync(l, "utf8").split("\n").slice(-20).join("\n"));
  }
  await cleanup();
  process.exit(1);
});
