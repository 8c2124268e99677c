import csv,re,sys
rows=list(csv.reader(open(sys.argv[1])))
hi=[i for i,r in enumerate(rows) if r and r[0]=='Address'][0]
h=rows[hi]; col={n:i for i,n in enumerate(h)}
sass={}
if len(sys.argv)>2:
  for l in open(sys.argv[2]):
    m=re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;',l)
    if m: sass[int(m.group(1),16)]=m.group(2)
rs=[r for r in rows[hi+1:] if len(r)>=len(h)]
base=int(rs[0][col['Address']],16)
lo,hi2=int(sys.argv[3],16),int(sys.argv[4],16)
for r in rs:
    a=int(r[col['Address']],16)-base
    if lo<=a<=hi2:
        print(f"{a:05x} ex={int(r[col['Instructions Executed']] or 0)/1e6:6.2f}M disp={r[col['stall_dispatch']]:>5} sel={r[col['stall_selected']]:>5} ssb={r[col['stall_short_sb']]:>5} wait={r[col['stall_wait']]:>4} | {sass.get(a, r[col['Source']].strip())}")
