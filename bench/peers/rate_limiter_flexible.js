'use strict';
// rate-limiter-flexible's RateLimiterRedis on ioredis: "points per duration",
// a counter that starts at the key's first hit and expires after the duration.
// One EVALSHA per decision (SET NX EX, INCRBY, PTTL); the library denies on
// the client when the returned count passes the limit (the count still grows).

const { RateLimiterRedis } = require('rate-limiter-flexible');
const { run } = require('./harness');

run(
  (opts, client) => new RateLimiterRedis({
    storeClient: client,
    keyPrefix: 'peer:rlflex',
    points: opts.limit,
    duration: Math.floor(opts.periodMs / 1000), // the library counts whole seconds
  }),
  async (limiter, key) => {
    try {
      await limiter.consume(key, 1);
      return true;
    } catch (rejection) {
      if (rejection instanceof Error) throw rejection; // Redis failed
      return false; // a RateLimiterRes: denied
    }
  },
);
