'use strict';
// redis-gcra (Losant): GCRA with one stored value per key (the theoretical
// arrival time). One EVALSHA per decision (GET, then SET PX when allowed); the
// script takes the current time from the client's clock (Date.now()).

const RedisGCRA = require('redis-gcra');
const { run } = require('./harness');

run((opts) => {
  const limiters = new Map();
  return async (client, key) => {
    let limiter = limiters.get(client);
    if (!limiter) {
      // burst = rate = L per period: the same capacity as porteiro's default B = L.
      limiter = RedisGCRA({
        redis: client, keyPrefix: 'peer:gcra',
        burst: opts.limit, rate: opts.limit, period: opts.periodMs,
      });
      limiters.set(client, limiter);
    }
    const result = await limiter.limit({ key });
    return !result.limited;
  };
});
