-- fixed_window_wait.lua (part, see cmake/embed_lua.cmake): a fixed_window
-- check that cannot pass now waits until the judged window begins (wait,
-- set before), or the next one when it does not fit in the judged one
-- (later), or forever (-1) when it exceeds the limit itself.
if later then
  wait = window_end
end
if cost > L then
  wait = -1
end
