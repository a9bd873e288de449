"""Medians over the interleaved runs of run.sh: mask p50/p99 (1st and 2nd document),
commit p50, compile p50/p99, and the compiled/refused counts, before and after."""
import glob, re, statistics, sys
rows = {}
for path in sorted(glob.glob("*-[0-9].txt")):
    which = path.split("-")[0]
    vocab = None
    for line in open(path):
        m = re.match(r"== (\S+):", line)
        if m:
            vocab = m.group(1)
            continue
        m = re.match(r"compiled (\d+), refused/unsupported (\d+)", line)
        if m:
            rows.setdefault((vocab, "compiled/refused", which), []).append(f"{m.group(1)}/{m.group(2)}")
            continue
        m = re.match(r"formwork (mask, 1st document|mask, 2nd document|commit|compile):\s+n=(\d+).*p50=([\d.]+) p99=([\d.]+)", line)
        if m:
            what = m.group(1)
            rows.setdefault((vocab, what + " n", which), []).append(m.group(2))
            rows.setdefault((vocab, what + " p50", which), []).append(float(m.group(3)))
            rows.setdefault((vocab, what + " p99", which), []).append(float(m.group(4)))
keys = sorted({(v, w) for (v, w, _) in rows}, key=lambda k: (k[0], k[1]))
print("| vocabulary | measure | before (eba5fd5) | after (HEAD) | after / before |")
print("|---|---|---|---|---|")
for v, w in keys:
    b, a = rows.get((v, w, "before"), []), rows.get((v, w, "after"), [])
    if b and isinstance(b[0], float):
        mb, ma = statistics.median(b), statistics.median(a)
        unit = "ms" if "compile" in w else "µs"
        f = (lambda x: f"{x/1000:.2f} ms") if "compile" in w else (lambda x: f"{x:.2f} µs")
        print(f"| {v} | {w} | {f(mb)} | {f(ma)} | {ma/mb:.2f} |")
    else:
        print(f"| {v} | {w} | {', '.join(sorted(set(b)))} | {', '.join(sorted(set(a)))} | same: {set(a) == set(b)} |")
print(f"\nruns: before {len(rows.get((keys[0][0], keys[0][1], 'before'), []))}, after {len(rows.get((keys[0][0], keys[0][1], 'after'), []))} (medians over runs)")
