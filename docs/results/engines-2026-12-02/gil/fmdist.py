import sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4] / "python" / "tests"))
import formwork
from test_gil import vocab, walked_matchers
tok = vocab(); ms = walked_matchers(tok, formwork.Compiler(tok))
rows = [(m, i) for i, m in enumerate(ms)]
bm = formwork.allocate_bitmask(len(ms), tok.vocab_size)
fm, se = [], []
for _ in range(200):
    t0 = time.perf_counter(); formwork.fill_masks(rows, bm); fm.append((time.perf_counter()-t0)*1e3)
    t0 = time.perf_counter()
    for i, m in enumerate(ms): m.fill_mask(bm, i)
    se.append((time.perf_counter()-t0)*1e3)
for name, xs in (("fill_masks", fm), ("serial", se)):
    xs.sort(); print(name, "min %.2f p10 %.2f p50 %.2f p90 %.2f p99 %.2f max %.2f" % (xs[0], xs[20], xs[100], xs[180], xs[198], xs[-1]))
