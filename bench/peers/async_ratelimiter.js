'use strict';
// async-ratelimiter (microlink): a sliding window log in a sorted set, one
// member per allowed request. One EVALSHA per decision (EXISTS, ZREMRANGEBYSCORE,
// ZCARD, ZRANGE, ZADD, PEXPIRE); the timestamp (ms with a fraction) comes from
// the client's clock.

const RateLimiter = require('async-ratelimiter');
const { run } = require('./harness');

run(
  (opts, client) => new RateLimiter({
    db: client, namespace: 'peer:asyncrl', max: opts.limit, duration: opts.periodMs,
  }),
  // remaining counts the units left before this request: 0 means denied.
  async (limiter, key) => (await limiter.get({ id: key })).remaining > 0,
);
