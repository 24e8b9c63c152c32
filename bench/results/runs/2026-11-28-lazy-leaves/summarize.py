import csv, glob, os, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(d, '*_r*.csv'))):
    b, r = os.path.basename(f)[:-4].split('_r')
    for row in csv.DictReader(open(f)):
        if row['benchmark'] != 'dlstm': continue
        rows[(b, int(r), row['variant'], row['size'])] = row
rounds = sorted({k[1] for k in rows})
out = []
for size in ('l2_c1024', 'l4_c1024'):
    for b in ('base', 'new'):
        pr = [float(rows[(b, r, 'operators_gradient', size)]['paired_ratio']) for r in rounds if (b, r, 'operators_gradient', size) in rows]
        pe = [float(rows[(b, r, 'operators_each_statement_gradient', size)]['paired_ratio']) for r in rounds if (b, r, 'operators_each_statement_gradient', size) in rows]
        print(f"{size} {b}: operators/fused paired ratio per round {['%.3f'%x for x in pr]} median {statistics.median(pr):.3f}; each-statement median {statistics.median(pe):.3f}")
        out.append((size, b, 'operators_over_fused', statistics.median(pr), min(pr), max(pr), len(pr)))
        out.append((size, b, 'each_statement_over_fused', statistics.median(pe), min(pe), max(pe), len(pe)))
    for v in ('gradient', 'operators_gradient', 'operators_each_statement_gradient', 'objective', 'plain_objective'):
        rr = [float(rows[('new', r, v, size)]['median_ms']) / float(rows[('base', r, v, size)]['median_ms']) for r in rounds if ('new', r, v, size) in rows and ('base', r, v, size) in rows]
        nb = [float(rows[('base', r, v, size)]['median_ms']) for r in rounds if ('base', r, v, size) in rows]
        nn = [float(rows[('new', r, v, size)]['median_ms']) for r in rounds if ('new', r, v, size) in rows]
        print(f"  {size} {v}: new/base per round {['%.3f'%x for x in rr]} median {statistics.median(rr):.3f}  (base {statistics.median(nb):.2f} ms, new {statistics.median(nn):.2f} ms)")
        out.append((size, 'new_over_base', v, statistics.median(rr), min(rr), max(rr), len(rr)))
if len(sys.argv) > 2:
    with open(sys.argv[2], 'w', newline='') as f:
        w = csv.writer(f); w.writerow(['size', 'build', 'quantity', 'median', 'min', 'max', 'rounds'])
        for o in out: w.writerow([o[0], o[1], o[2], f"{o[3]:.3f}", f"{o[4]:.3f}", f"{o[5]:.3f}", o[6]])
