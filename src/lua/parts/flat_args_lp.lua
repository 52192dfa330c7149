-- flat_args_lp.lua (part, see cmake/embed_lua.cmake): the head of a flat
-- script whose limit is L per P: ARGV cost, L, P (ms), [now], as numbers.
-- The batch wrapping (embed_lua.cmake) takes these lines out again: keep
-- them one statement a line, as they are.
-- Globals read once: each global is a table lookup on every use.
local floor = math.floor
local call, key, argv = redis.call, KEYS[1], ARGV
local now = argv[4]
--@part flat_now
local cost, L, P = argv[1] + 0, argv[2] + 0, argv[3] + 0
