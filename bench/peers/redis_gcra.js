'use strict';
// redis-gcra (Losant): GCRA with one stored value per key (the theoretical
// arrival time). One EVALSHA per decision (GET, then SET PX when allowed); the
// script takes the current time from the client's clock (Date.now()).

const RedisGCRA = require('redis-gcra');
const { run } = require('./harness');

run(
  // burst = rate = L per period: the same capacity as porteiro's default B = L.
  (opts, client) => RedisGCRA({
    redis: client, keyPrefix: 'peer:gcra',
    burst: opts.limit, rate: opts.limit, period: opts.periodMs,
  }),
  async (limiter, key) => !(await limiter.limit({ key })).limited,
);
