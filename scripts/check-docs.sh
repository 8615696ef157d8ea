#!/usr/bin/env bash
#
# scripts/check-docs.sh: the documentation's links and its list of settings.
#
#   - every relative link, `](path)` or `](path#anchor)`, in README.md, CHANGELOG.md,
#     docs/*.md, src/README.md, test/README.md, bench/README.md and bench/RESULTS.md names a
#     file or folder that exists, and an anchor names a heading of that Markdown file (GitHub's
#     anchors: lower case, punctuation dropped, spaces as hyphens, a -N suffix for repeated
#     headings);
#   - every code span of those files whose whole text is a repository path, one that matches
#     ^(src|test|bench|scripts|docs|sql|expected)/[A-Za-z0-9_./-]+$ (so no glob or placeholder),
#     names a file or folder that exists (relative to the repository root), or one that git
#     ignores (what a build or scripts/install-deps.sh makes: test/node_modules, bench/build/);
#   - every GUC the source defines (DefineCustom*Variable("shape_sync.x", ...) anywhere under
#     src/pg/) has a row in the table of docs/configuration.md, and the table names no other.
#
# Prints each problem and exits 1 if there is any. Links inside code blocks and code spans,
# links with a scheme (https:, mailto:), and paths in code blocks are not checked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 - "$@" <<'PY'
import glob, os, re, subprocess, sys

problems = []

def strip_code(text):
    text = re.sub(r'^(```|~~~).*?^\1[^\n]*$', '', text, flags=re.S | re.M)
    return re.sub(r'`[^`\n]*`', '', text)

def slug(heading):
    s = re.sub(r'`', '', heading.strip()).lower()
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        seen, out = {}, set()
        text = re.sub(r'^(```|~~~).*?^\1[^\n]*$', '', open(path, encoding='utf-8').read(),
                      flags=re.S | re.M)
        for h in re.findall(r'^#{1,6}\s+(.*?)\s*#*\s*$', text, re.M):
            s = slug(h)
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f'{s}-{n}')
        anchor_cache[path] = out
    return anchor_cache[path]

docs = [p for p in ['README.md', 'CHANGELOG.md', 'src/README.md', 'test/README.md',
                    'bench/README.md', 'bench/RESULTS.md']
        if os.path.exists(p)] + sorted(glob.glob('docs/*.md'))
def ignored(path):
    p = path.rstrip('/')
    return any(subprocess.run(['git', 'check-ignore', '-q', '--', q],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
               for q in (p, p + '/'))

path_re = re.compile(r'^(src|test|bench|scripts|docs|sql|expected)/[A-Za-z0-9_./-]+$')
paths = 0
link_re = re.compile(r'\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
checked = 0
for doc in docs:
    raw = open(doc, encoding='utf-8').read()
    no_blocks = re.sub(r'^(```|~~~).*?^\1[^\n]*$', '', raw, flags=re.S | re.M)
    for span in re.findall(r'`([^`\n]*)`', no_blocks):
        if path_re.match(span):
            paths += 1
            if not os.path.exists(span) and not ignored(span):
                problems.append(f'{doc}: `{span}` names no file or folder of the repository')
    text = strip_code(raw)
    for target in link_re.findall(text):
        if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
            continue
        checked += 1
        path, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(dest):
            problems.append(f'{doc}: link to {target}: {dest} does not exist')
            continue
        if anchor:
            if not dest.endswith('.md') or os.path.isdir(dest):
                problems.append(f'{doc}: link to {target}: an anchor into a file that is not Markdown')
            elif anchor not in anchors(dest):
                problems.append(f'{doc}: link to {target}: {dest} has no heading #{anchor}')

defined = set()
for f in glob.glob('src/pg/**/*.c', recursive=True):
    defined |= set(re.findall(r'DefineCustom\w+Variable\(\s*"(shape_sync\.\w+)"',
                              open(f, encoding='utf-8').read()))
conf = 'docs/configuration.md'
documented = set(re.findall(r'^\|\s*`(shape_sync\.\w+)`\s*\|', open(conf, encoding='utf-8').read(), re.M)) \
    if os.path.exists(conf) else set()
for g in sorted(defined - documented):
    problems.append(f'{conf}: {g} is defined in src/pg/ but has no row in the settings table')
for g in sorted(documented - defined):
    problems.append(f'{conf}: {g} has a row in the settings table but src/pg/ defines no such GUC')

for p in problems:
    print(p)
print(f'check-docs: {checked} links and {paths} paths in {len(docs)} files, {len(defined)} GUCs; '
      f'{len(problems)} problem(s)')
sys.exit(1 if problems else 0)
PY
