import csv,re,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hi=[i for i,r in enumerate(rows) if r and r[0]=='Address'][0]
h=rows[hi]; col={n:i for i,n in enumerate(h)}
recs=[]
for r in rows[hi+1:]:
    if len(r)<len(h): continue
    recs.append((int(r[col['Address']],16), int(r[col['Instructions Executed']] or 0), int(r[col['stall_dispatch']] or 0)))
base=recs[0][0]
sass={}
for l in open(sys.argv[2]):
    m=re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;',l)
    if m: sass[int(m.group(1),16)]=m.group(2)
def reg(o):
    m=re.match(r'^-?\|?R(\d+)(\.reuse)?',o.strip())
    return (int(m.group(1)),bool(m.group(2))) if m else None
info=[]
prev=None
for addr,ex,disp in recs:
    t=re.sub(r'^@!?U?P\w+\s+','',sass.get(addr-base,''))
    parts=t.split(None,1)
    op=parts[0] if parts else ''
    if op.startswith('FFMA') and ex>0:
        ops=parts[1].split(',')
        srcs=[reg(o) for o in ops[1:4]]
        cached=[bool(prev and srcs[k] and prev[k] and prev[k][1] and prev[k][0]==srcs[k][0]) for k in range(3)]
        un=[srcs[k][0] for k in range(3) if srcs[k] and not cached[k]]
        c2=max(collections.Counter(r%2 for r in un).values()) if un else 0
        prev=srcs
        info.append((op,ex,disp,(len(un),c2)))
    else:
        prev=None
        info.append((op,ex,disp,None))
g=collections.defaultdict(lambda:[0,0])
for i in range(1,len(info)):
    op,ex,disp,k=info[i]
    if not op.startswith('FFMA') or ex==0: continue
    pk=info[i-1][3]
    key=('prev',pk,'cur',k)
    g[key][0]+=ex; g[key][1]+=disp
tot=sum(v[0] for v in g.values())
for k in sorted(g, key=lambda x:str(x)):
    ex,d=g[k]
    if ex/tot>0.005: print(k, f"{100*ex/tot:5.1f}%", f"{d/(ex/1e6):7.1f}")
