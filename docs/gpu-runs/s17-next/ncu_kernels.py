# Sums an `ncu --metrics gpu__time_duration.sum --csv` log by kernel name.
# usage: python3 ncu_kernels.py LOG.csv [LOG2.csv ...]
import csv, sys, collections
for path in sys.argv[1:]:
    rows = [r for r in csv.reader(l for l in open(path, errors="replace") if l.startswith('"'))]
    if not rows:
        print(f"{path}: no rows"); continue
    h = rows[0]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    tot = collections.OrderedDict()
    cnt = collections.Counter()
    for r in rows[1:]:
        try:
            v = float(r[vi].replace(",", ""))
        except ValueError:
            continue
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(r[ui], 1e-6)
        name = r[ki].split("(")[0][:70]
        tot[name] = tot.get(name, 0.0) + v * scale
        cnt[name] += 1
    print(f"== {path}: {sum(cnt.values())} launches, {sum(tot.values()):.3f} ms")
    for name, ms in sorted(tot.items(), key=lambda x: -x[1]):
        print(f"  {ms:8.3f} ms  x{cnt[name]:<4d} {name}")
