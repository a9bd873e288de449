import sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4] / "python" / "tests"))
import formwork
from test_gil import vocab, walked_matchers
tok = vocab(); ms = walked_matchers(tok, formwork.Compiler(tok))
rows = [(m, i) for i, m in enumerate(ms)]
bm = formwork.allocate_bitmask(len(ms), tok.vocab_size)
fm = []
for _ in range(100):
    time.sleep(0.01)
    t0 = time.perf_counter(); formwork.fill_masks(rows, bm); fm.append((time.perf_counter()-t0)*1e3)
fm.sort(); print("fill_masks after 10 ms idle: min %.2f p50 %.2f p90 %.2f p99 %.2f max %.2f" % (fm[0], fm[50], fm[90], fm[98], fm[-1]))
