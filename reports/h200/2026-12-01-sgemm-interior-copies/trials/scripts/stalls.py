import csv,sys,re,collections
rows=list(csv.reader(open(sys.argv[1])))
# find header row
hi=[i for i,r in enumerate(rows) if r and r[0]=='Address'][0]
h=rows[hi]; data=rows[hi+1:]
col={n:i for i,n in enumerate(h)}
reasons=[n for n in h if n.startswith('stall_') and '(Not Issued)' not in n]
tot=collections.Counter(); byop=collections.defaultdict(collections.Counter); nins=collections.Counter()
recs=[]
for r in data:
    if len(r)<len(h): continue
    src=r[col['Source']].strip(); op=src.split()[0] if src else ''
    if op.startswith('@'): op=src.split()[1]
    opb=op.split('.')[0]
    ex=int(r[col['Instructions Executed']] or 0)
    nins[opb]+=ex
    st={k:int(r[col[k]] or 0) for k in reasons}
    for k,v in st.items(): tot[k]+=v; byop[opb][k]+=v
    recs.append((src,ex,st))
S=sum(tot.values())
print("total samples",S, "instructions executed", sum(nins.values()))
for k,v in tot.most_common(10): print(f"  {k:22s} {v:8d} {100*v/S:5.1f}%")
print("executed by opcode:", ', '.join(f"{k}:{v/1e6:.1f}M" for k,v in nins.most_common(12)))
print("dispatch samples by opcode:", ', '.join(f"{k}:{c['stall_dispatch']}" for k,c in sorted(byop.items(), key=lambda x:-x[1]['stall_dispatch'])[:6]))
if len(sys.argv)>2:
    import pickle; pickle.dump(recs,open(sys.argv[2],'wb'))
