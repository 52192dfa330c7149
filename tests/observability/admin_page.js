// admin_page.js — porteirod's admin page (daemon/admin/page.html) in a real
// browser: Debian's chromium, headless, driven by playwright-core, against a
// real porteirod under load with a real redis-server behind it.
//
//   - the hot denied key is in the top table within 2 s of opening the page;
//   - the decision charts and the latency histogram draw (pixels on the
//     canvas, not only a call);
//   - the Redis node turns red within 2 s of Redis dying (kill -9), and
//     green again after it restarts;
//   - no console error, no uncaught exception, no failed request;
//   - a screenshot, to $SCREENSHOT when set (docs/img/admin_page.png).
//
// Env: PORTEIROD (the binary), CHROMIUM (default /usr/bin/chromium),
// SCREENSHOT (optional). Exit 0 pass, 1 fail, 77 skipped (no chromium).
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

// Load: one hot key far over its limit (mostly denied) and a spread of cold
// keys (allowed), on a few keep-alive connections, until stopped.
function loadLoop(port) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  let running = true, sent = 0;
  const worker = async (w) => {
    for (let i = 0; running; i++) {
      const key = i % 2 === 0 ? HOT_KEY : `user:${(w * 7919 + i) % 500}`;
      await request(port, "POST", "/v1/check", JSON.stringify({ policy: "api", key }), agent);
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

async function waitFor(page, selector, ms, what) {
  const t0 = Date.now();
  try {
    await page.waitForSelector(selector, { timeout: ms });
  } catch (e) {
    throw new Error(`${what}: not within ${ms} ms (${selector})`);
  }
  return Date.now() - t0;
}

async function main() {
  if (!fs.existsSync(CHROMIUM)) { log(`SKIP: ${CHROMIUM} not found`); return 77; }
  if (!PORTEIROD) throw new Error("PORTEIROD is not set");
  const { chromium } = require("./browser/node_modules/playwright-core");
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "porteiro-admin-page-"));

  const redisPort = await freePort();
  let redis = await startRedis(redisPort);
  const { port, admin } = await startPorteirod(redisPort);
  const load = loadLoop(port);
  await sleep(1500); // a second of load before the page opens

  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           `--user-data-dir=${path.join(tmp, "chromium")}`],
  });
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
    page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
    page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure() && r.failure().errorText}`));
    page.on("response", (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });

    const t0 = Date.now();
    await page.goto(`http://127.0.0.1:${admin}/`);
    await waitFor(page, `#top-body tr[data-policy="api"][data-key="${HOT_KEY}"]`, 2000 - (Date.now() - t0),
                  "the hot denied key in the top table within 2 s");
    log(`hot key shown ${Date.now() - t0} ms after opening the page`);
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

    // Redis dies: red within 2 s.
    const killed = Date.now();
    stop(redis, "SIGKILL");
    await exited(redis, 2000);
    const red = await waitFor(page, '#redis-nodes .node[data-state="down"]', 2000 - (Date.now() - killed),
                              "the Redis node red within 2 s of Redis dying");
    const pill = await page.$eval("#status-pill", (p) => p.dataset.status);
    if (pill !== "redis_down") throw new Error(`the status says ${pill} with Redis down`);
    log(`node red ${Date.now() - killed} ms after kill -9 (waited ${red} ms)`);
    await sleep(3000); // the dip and the fallback show on the charts

    // Redis back: green.
    const restarted = Date.now();
    redis = await startRedis(redisPort);
    await waitFor(page, '#redis-nodes .node[data-state="up"]', 10000, "the Redis node green after Redis restarted");
    log(`node green ${Date.now() - restarted} ms after restart`);
    await sleep(4000); // a few seconds of recovery on the charts

    if (process.env.SCREENSHOT) {
      await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
      log(`screenshot: ${process.env.SCREENSHOT}`);
    }
    log(`${load.sent()} checks sent`);
  } finally {
    await browser.close();
    await load.stop();
  }
  if (problems.length) throw new Error("the page logged problems:\n  " + problems.join("\n  "));
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
