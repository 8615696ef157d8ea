#!/usr/bin/env bash
#
# scripts/check-layout.sh: the source layout's rules, checked on the include graph.
#
#   - src/contract/ includes nothing from src/net/ or src/pg/ (the Makefile also
#     compiles it without their include paths), and only src/net/ includes
#     <microhttpd.h> (which no include path can keep out: it is in /usr/include);
#   - src/net/ includes nothing from src/pg/;
#   - src/pg/ includes from src/net/ only net/http_server.h, which starts the server;
#   - no include circle between modules: a module is a file's stem (registry.c and
#     registry.h are one; foo_internal.h, what foo's files share, is part of foo), and
#     an edge a -> b means a file of a includes b's header;
#   - src/README.md names every source file and no other, so the map stays true: a file
#     as `floor/name.c`, `floor/name.h` or, for both, `floor/name.[ch]` (relative to src/);
#   - no source file is over 1,300 lines (one concern per file).
#
# Prints each violation and exits 1 if there is any; prints the module graph's
# edges with --graph.  Run by scripts/test.sh (stage "layout").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 - "$@" <<'PY'
import os, re, sys
from collections import defaultdict

files = {}
for root, _, names in os.walk('src'):
    for n in names:
        if n.endswith(('.c', '.h')):
            files[os.path.join(root, n)] = None
by_name = defaultdict(list)
for f in files:
    by_name[os.path.basename(f)].append(f)

def floor(path):
    parts = path.split('/')
    return parts[1]

def module(path):
    # foo_internal.h holds what foo's own files share: it is part of foo
    stem = os.path.splitext(path)[0]
    return stem[:-len('_internal')] if stem.endswith('_internal') else stem

problems = []
edges = defaultdict(set)
inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
sys_re = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)
for f in sorted(files):
    text = open(f, encoding='utf-8').read()
    # libmicrohttpd is in /usr/include, so no include path keeps it out: only net/ may use it
    if floor(f) != 'net' and 'microhttpd.h' in sys_re.findall(text):
        problems.append(f'{f} includes <microhttpd.h>: only src/net/ may use libmicrohttpd')
    for name in inc_re.findall(text):
        if '/' in name:
            continue            # a PostgreSQL header ("utils/guc.h"); ours are included by name
        targets = by_name.get(name, [])
        if len(targets) > 1:
            problems.append(f'{f} includes "{name}", which names {len(targets)} files: '
                            'give each source file a name of its own')
            continue
        if not targets:
            continue            # a system or PostgreSQL header
        t = targets[0]
        a, b = floor(f), floor(t)
        if a == 'contract' and b != 'contract':
            problems.append(f'{f} includes {t}: the contract reaches no other floor')
        if a == 'net' and b == 'pg':
            problems.append(f'{f} includes {t}: the HTTP threads never call PostgreSQL')
        if a == 'pg' and b == 'net' and os.path.basename(t) != 'http_server.h':
            problems.append(f'{f} includes {t}: pg/ reaches net/ only through http_server.h')
        if module(f) != module(t):
            edges[module(f)].add(module(t))

# Circles: strongly connected components of more than one module (Tarjan).
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in sorted(edges.get(v, ())):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
for v in sorted({module(f) for f in files}):
    if v not in index:
        visit(v)
for comp in sccs:
    problems.append('include circle: ' + ' <-> '.join(c.replace('src/', '') for c in comp))

# The map: src/README.md names every source file (as `path` relative to src/), and no other.
MAX_LINES = 1300
try:
    listed = {os.path.splitext(m)[0] for m in re.findall(r'`([\w/-]+\.(?:c|h|\[ch\]))`',
                                                          open('src/README.md', encoding='utf-8').read())}
except FileNotFoundError:
    listed = set()
    problems.append('src/README.md is missing: it maps every source file in one line')
present = {os.path.splitext(os.path.relpath(f, 'src'))[0] for f in files}
for f in sorted(present - listed):
    problems.append(f'src/{f}.c/.h is not in src/README.md')
for f in sorted(listed - present):
    problems.append(f'src/README.md names {f}, which does not exist')
# One concern per file: a file past MAX_LINES has grown several; split it.
for f in sorted(files):
    n = sum(1 for _ in open(f, encoding='utf-8'))
    if n > MAX_LINES:
        problems.append(f'{f} has {n} lines, over {MAX_LINES}: split it by concern')

if '--graph' in sys.argv[1:]:
    for a in sorted(edges):
        for b in sorted(edges[a]):
            print(f'{a} -> {b}')
for p in problems:
    print(p)
print(f'layout: {len(files)} files, {sum(len(v) for v in edges.values())} module edges, '
      f'{len(problems)} problem(s)')
sys.exit(1 if problems else 0)
PY
