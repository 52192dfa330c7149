-- flat_get24.lua (part, see cmake/embed_lua.cmake): a one-limit flat script
-- reads the state at key, v: none (false), or 24 bytes, else an error. It
-- opens "if v then", which the script closes after reading v.
local v = call('GET', key)
if v then
  if #v ~= 24 then
    return redis.error_reply('WRONGTYPE porteiro: the limiter key holds no limiter state')
  end
