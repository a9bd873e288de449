import sys, time, statistics, json
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4] / "python" / "tests"))
import formwork
from test_gil import vocab, walked_matchers
tok = vocab(); ms = walked_matchers(tok, formwork.Compiler(tok))
bm = formwork.allocate_bitmask(len(ms), tok.vocab_size)
def med(f, n=41):
    xs=[]
    for _ in range(n):
        t0=time.perf_counter(); f(); xs.append((time.perf_counter()-t0)*1e3)
    return (round(min(xs), 2), round(statistics.median(xs), 2))
def serial():
    for i,m in enumerate(ms): m.fill_mask(bm,i)
out = {}
with ThreadPoolExecutor(8) as ex:
    list(ex.map(lambda i: None, range(64)))
    serial()
    out["serial"] = med(serial)
    out["pool8_noop"] = med(lambda: list(ex.map(lambda i: None, range(256))))
    out["pool8_fill"] = med(lambda: list(ex.map(lambda i: ms[i].fill_mask(bm, i), range(256))))
    out["fill_masks"] = med(lambda: formwork.fill_masks([(m, i) for i, m in enumerate(ms)], bm))
print(json.dumps(out))
