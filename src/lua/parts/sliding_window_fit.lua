-- sliding_window_fit.lua (part, see cmake/embed_lua.cmake): a check of at
-- most L units that does not fit at the judged moment fits after wait ms:
-- later in this window, or in the next (later = true), where the current
-- count becomes the previous one (sliding_fit in src/core/algorithms.c).
-- Needs cur, prev, shift and el, the ms elapsed in the judged window.
local room, fit = L - cur - cost, P
if room >= 0 then
  fit = 0
  if prev > 0 then
    fit = math.max(0, P - floor(room * P / prev))
  end
end
if fit < P then
  wait = shift + fit - el
else
  room, fit = L - cost, P
  if room >= 0 then
    fit = 0
    if cur > 0 then
      fit = math.max(0, P - floor(room * P / cur))
    end
  end
  wait = shift + P - el + fit
  later = true
end
