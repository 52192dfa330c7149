-- token_bucket_refill.lua (part, see cmake/embed_lua.cmake): the two
-- outcomes of a refill, written after its test "if now - ts >= ceil(used /
-- L) then" (the general script divides with ceil_div, the flat ones need
-- not, see check/gcra.lua): a full bucket, or L scaled units per ms since
-- ts taken off the units used (compared first: no overflow).
  used = 0
else
  used = used - (now - ts) * L
end
