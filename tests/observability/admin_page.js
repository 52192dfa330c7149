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

async function main() {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} not found`);
  if (!PORTEIROD) throw new Error("PORTEIROD is not set");
  const { chromium } = require("./browser/node_modules/playwright-core");
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "porteiro-admin-page-"));

  const redisPort = await freePort();
  let redis = await startRedis(redisPort);
  const { d, port, admin } = await startPorteirod(redisPort);
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

    // Redis dies: red within 2 s.
    const killed = Date.now();
    stop(redis, "SIGKILL");
    await exited(redis, 2000);
    t = await seen("down", 10000, "the Redis node red after Redis died");
    log(`node red ${t.down - killed} ms after kill -9`);
    if (t.down - killed > 2000) throw new Error(`the node took ${t.down - killed} ms to turn red (over 2 s)`);
    const pill = await page.$eval("#status-pill", (p) => p.dataset.status);
    if (pill !== "redis_down") throw new Error(`the status says ${pill} with Redis down`);
    await sleep(3000); // the dip and the fallback show on the charts

    // Redis back: green.
    const restarted = Date.now();
    redis = await startRedis(redisPort);
    t = await seen("upAgain", 15000, "the Redis node green after Redis restarted");
    log(`node green ${t.upAgain - restarted} ms after the restart`);
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
