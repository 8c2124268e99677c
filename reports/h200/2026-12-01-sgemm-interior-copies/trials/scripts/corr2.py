import csv,re,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hi=[i for i,r in enumerate(rows) if r and r[0]=='Address'][0]
h=rows[hi]; col={n:i for i,n in enumerate(h)}
recs=[]
for r in rows[hi+1:]:
    if len(r)<len(h): continue
    recs.append((int(r[col['Address']],16), r[col['Source']].strip(), int(r[col['Instructions Executed']] or 0), int(r[col['stall_dispatch']] or 0), int(r[col['stall_selected']] or 0)))
base=recs[0][0]
sass={}
for l in open(sys.argv[2]):
    m=re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;',l)
    if m: sass[int(m.group(1),16)]=m.group(2)
def reg(o):
    m=re.match(r'^-?\|?R(\d+)(\.reuse)?',o.strip())
    return (int(m.group(1)),bool(m.group(2))) if m else None
prev=None; groups=collections.defaultdict(lambda:[0,0,0]); miss=0
for addr,src,ex,disp,sel in recs:
    t=sass.get(addr-base)
    if t is None: miss+=1; prev=None; continue
    t=re.sub(r'^@!?U?P\w+\s+','',t)
    parts=t.split(None,1)
    if not parts[0].startswith('FFMA') or ex==0: prev=None; continue
    ops=parts[1].split(',')
    srcs=[reg(o) for o in ops[1:4]]
    cached=[bool(prev and srcs[k] and prev[k] and prev[k][1] and prev[k][0]==srcs[k][0]) for k in range(3)]
    un=[srcs[k][0] for k in range(3) if srcs[k] and not cached[k]]
    c2=max(collections.Counter(r%2 for r in un).values()) if un else 0
    c4=max(collections.Counter(r%4 for r in un).values()) if un else 0
    key=(len(un),c2,c4)
    g=groups[key]; g[0]+=ex; g[1]+=disp; g[2]+=sel
    prev=srcs
print("unmatched", miss)
tot=sum(v[0] for v in groups.values())
print("(uncached, max same bank mod2, mod4): share of FFMA, dispatch samples / 1M FFMA, selected / 1M")
for k in sorted(groups):
    ex,d,s=groups[k]; print(k, f"{100*ex/tot:5.1f}%", f"{d/(ex/1e6):7.1f}", f"{s/(ex/1e6):7.1f}")
