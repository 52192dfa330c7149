-- token_bucket_view.lua (part, see cmake/embed_lua.cmake): a flat script's
-- view of the stored bucket v (16 bytes, checked): used, the units used x
-- P, and ts, the time of its last refill (ms), refilled to now. A clock
-- that went back adds nothing and keeps the stored ts. Needs now, L and
-- the locals used and ts.
used, ts = struct.unpack('<dd', v)
if now > ts then
  if now - ts >= ceil(used / L) then
    --@part token_bucket_refill
  ts = now
end
