'use strict';
// The load loop shared by every peer script: the flags and the printed JSON
// are those of `porteiro bench`, so bench/compare_peers.sh reads both alike.
// C Redis connections, P requests in flight on each, N decisions in all over
// K random keys; each decision's latency is taken from call to answer.

const Redis = require('ioredis');

const USAGE = `usage: node PEER.js [--redis URL] [--connections C] [--pipeline P]
                   [--requests N] [--keys K] [--limit L] [--period-ms MS]
  --redis        redis://host:port[/db] (default $PORTEIRO_REDIS, else redis://127.0.0.1:6379)
  --connections  Redis connections (default 50)
  --pipeline     decisions in flight on each connection (default 1)
  --requests     decisions measured (default 50000)
  --keys         distinct keys, picked at random per decision (default 1000)
  --limit        L units per period on every key (default 1000000: nearly all allowed)
  --period-ms    the period, ms (default 60000)
prints {"ops_per_sec":...,"p50_us":...,"p99_us":...,"allowed":...,"denied":...,"errors":...}
exit: 0 done, 2 invalid arguments, 3 Redis unreachable or a decision failed`;

// Flag name -> [option field, minimum accepted value].
const FLAGS = {
  '--connections': ['connections', 1],
  '--pipeline': ['pipeline', 1],
  '--requests': ['requests', 1],
  '--keys': ['keys', 1],
  '--limit': ['limit', 1],
  '--period-ms': ['periodMs', 1000],
};

function usageError(message) {
  process.stderr.write(`${message}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    redis: process.env.PORTEIRO_REDIS || 'redis://127.0.0.1:6379',
    connections: 50, pipeline: 1, requests: 50000, keys: 1000,
    limit: 1000000, periodMs: 60000,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (flag === '--help' || flag === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    if (value === undefined) usageError(`${flag}: missing value`);
    if (flag === '--redis') {
      opts.redis = value;
      continue;
    }
    const spec = FLAGS[flag];
    if (!spec) usageError(`unknown option '${flag}'`);
    if (!/^[0-9]+$/.test(value) || Number(value) < spec[1] || !Number.isSafeInteger(Number(value)))
      usageError(`${flag}: expected an integer >= ${spec[1]}, got '${value}'`);
    opts[spec[0]] = Number(value);
  }
  return opts;
}

// Nearest-rank percentile of sorted latencies (µs), rounded to whole µs.
function percentile(sorted, p) {
  const rank = Math.max(1, Math.ceil(p * sorted.length));
  return Math.round(sorted[rank - 1]);
}

// The JSON object of porteiro bench, over the decisions that were answered.
function printResult(state, elapsedS) {
  const done = state.allowed + state.denied;
  const sorted = state.latencyUs.subarray(0, done).sort(); // typed: numeric order
  process.stdout.write(`${JSON.stringify({
    ops_per_sec: Math.round(done / elapsedS),
    p50_us: done ? percentile(sorted, 0.5) : 0,
    p99_us: done ? percentile(sorted, 0.99) : 0,
    allowed: state.allowed,
    denied: state.denied,
    errors: state.errors,
  })}\n`);
}

async function connectAll(opts) {
  const clients = [];
  for (let i = 0; i < opts.connections; i++) {
    // No retries: a failing Redis must end the run, not stretch it.
    const client = new Redis(opts.redis, {
      maxRetriesPerRequest: 0, lazyConnect: true, retryStrategy: () => null,
    });
    client.on('error', () => {}); // surfaced through the failing command instead
    clients.push(client);
  }
  try {
    await Promise.all(clients.map((c) => c.connect()));
  } catch (err) {
    clients.forEach((c) => c.disconnect());
    throw new Error(`cannot connect to ${opts.redis}: ${err.message}`);
  }
  return clients;
}

// One worker: keeps one decision in flight until N have been issued in all.
// A failed decision is counted and stops every worker, as in porteiro bench:
// against a failing Redis, more requests would only measure the failure.
async function worker(state, decide, client) {
  while (state.issued < state.total && !state.failure) {
    state.issued++;
    const key = `k${Math.floor(Math.random() * state.keys)}`;
    const t0 = process.hrtime.bigint();
    let allowed;
    try {
      allowed = await decide(client, key);
    } catch (err) {
      state.errors++;
      state.failure = state.failure || err;
      return;
    }
    state.latencyUs[state.allowed + state.denied] = Number(process.hrtime.bigint() - t0) / 1000;
    if (allowed) state.allowed++;
    else state.denied++;
  }
}

// makeLimiter(opts, client) -> the peer's limiter object for one connection
// (made once per connection, as one per app process); decide(limiter, key) ->
// a promise of boolean allowed.
async function run(makeLimiter, decideWith) {
  const opts = parseArgs(process.argv.slice(2));
  let clients;
  try {
    clients = await connectAll(opts);
    const limiters = new Map(clients.map((c) => [c, makeLimiter(opts, c)]));
    const decide = (client, key) => decideWith(limiters.get(client), key);
    // Warm-up (not measured): loads each script on the server, one per client.
    await Promise.all(clients.map((c, i) => decide(c, `warmup${i}`)));

    const state = {
      issued: 0, total: opts.requests, keys: opts.keys, allowed: 0, denied: 0, errors: 0,
      failure: null, latencyUs: new Float64Array(opts.requests),
    };
    const workers = [];
    const start = process.hrtime.bigint();
    for (const client of clients)
      for (let p = 0; p < opts.pipeline; p++) workers.push(worker(state, decide, client));
    await Promise.all(workers);
    const elapsedS = Number(process.hrtime.bigint() - start) / 1e9;
    printResult(state, elapsedS);
    if (state.failure) throw state.failure;
  } catch (err) {
    process.stderr.write(`bench failed: ${err && err.message ? err.message : err}\n`);
    process.exitCode = 3;
  } finally {
    if (clients) clients.forEach((c) => c.disconnect());
  }
}

module.exports = { run };
