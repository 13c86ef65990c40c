#!/usr/bin/env bash
# The library's shape: every global symbol libengine.a defines starts with
# latent_ (no clashes with the programs that link it), the public headers
# include nothing private, no engine source file passes 1,000 lines, and no
# function in engine/ or server/ passes 80.
# env: LATENT_ROOT, LATENT_BUILD.
set -u
. "$(dirname "$0")/../harness.sh" layout

lib=$build/libengine.a
[ -f "$lib" ] || { echo "FAIL: $lib not built"; exit 1; }
bad=$(nm -g --defined-only "$lib" | awk 'NF == 3 && $3 !~ /^latent_/ { print $3 }' | sort -u)
total=$(nm -g --defined-only "$lib" | awk 'NF == 3' | wc -l)
if [ -z "$bad" ] && [ "$total" -gt 50 ]; then ok "all $total global symbols of libengine.a start with latent_"
else fail "libengine.a exports symbols without the latent_ prefix" "$(echo $bad | head -c 600)"; fi

priv=$(grep -n '#include "' "$root"/include/latent/*.h | grep -v '#include "latent/' || true)
[ -z "$priv" ] && ok "include/latent/ includes only include/latent/" || fail "a public header includes a private one" "$priv"

long=$(find "$root/engine" -name '*.[ch]' -exec wc -l {} + | awk '$2 != "total" && $1 > 1000')
[ -z "$long" ] && ok "no engine source over 1,000 lines" || fail "engine sources over 1,000 lines" "$long"

# Every function of engine/ and server/ (*.c) over 80 lines, by the script's
# own count (its opening comment says what it counts).
fns=$(cd "$root" && "$PY" - 80 $(find engine server -name '*.c' | sort) 2>&1 <<'PYEOF'
import re, sys
# Lists every C function longer than LIMIT lines, as "file:line name lines".
# A function's lines run from the first line of its signature (return type,
# storage class and attributes included, however many lines it spans) to
# its closing brace, both counted, blank and comment lines inside included;
# the comment above it is not. Comments, strings, character literals and
# preprocessor lines (with their continuations) are blanked first; then a
# '{' at brace depth 0 opens a function body when the code since the last
# top-level ';' or '}' ends in ')' (after any __attribute__((...))) and holds
# no '=' (so initializers and struct, union and enum bodies are not counted).
# Braces must balance outside preprocessor lines, or the file is named.
limit = int(sys.argv[1])

def blank(src):
    out, i, n, quote = [], 0, len(src), None
    while i < n:
        c = src[i]
        if quote:
            if c == '\\' and i + 1 < n:
                out.append(' \n' if src[i + 1] == '\n' else '  ')
                i += 2
                continue
            if c == quote:
                quote = None
            out.append('\n' if c == '\n' else ' ')
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j]))
            i = j
            continue
        elif src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
            continue
        elif c in '"\'':
            quote = c
            out.append(' ')
        else:
            out.append(c)
        i += 1
    lines, cont = ''.join(out).split('\n'), False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith('#'):
            cont = line.rstrip().endswith('\\')
            lines[k] = ''
    return lines

def name_of(decl):
    d = re.sub(r'(\s*__attribute__\s*\(\(.*?\)\))+\s*$', '', decl).rstrip()
    if not d.endswith(')'):
        return None
    depth = 0
    for k in range(len(d) - 1, -1, -1):  # the '(' that opens the parameter list
        depth += d[k] == ')'
        depth -= d[k] == '('
        if depth == 0:
            m = re.search(r'([A-Za-z_]\w*)\s*$', d[:k])
            return m.group(1) if m else None
    return None

for path in sys.argv[2:]:
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = blank(f.read())
    depth, decl, start, fn = 0, '', None, None
    for ln, line in enumerate(lines, 1):
        for c in line:
            if depth == 0:
                if c == '{':
                    name = name_of(decl) if '=' not in decl else None
                    fn = (name, start) if name else None
                    depth = 1
                elif c in ';}':
                    decl, start = '', None
                else:
                    if start is None and not c.isspace():
                        start = ln
                    decl += c
            elif c == '{':
                depth += 1
            elif c == '}':
                depth -= 1
                if depth == 0:
                    if fn and ln - fn[1] + 1 > limit:
                        print('%s:%d %s() %d lines' % (path, fn[1], fn[0], ln - fn[1] + 1))
                    decl, start, fn = '', None, None
        if depth == 0 and decl:
            decl += ' '
    if depth != 0:  # e.g. #if branches that each open a brace: count by hand
        print('%s: braces do not balance outside the preprocessor lines; cannot count' % path)
PYEOF
)
if [ $? -eq 0 ] && [ -z "$fns" ]; then ok "no function in engine/ or server/ over 80 lines"
else mapfile -t fn_lines <<< "$fns"; fail "functions over 80 lines (engine/, server/): split them into named steps" "${fn_lines[@]}"; fi

echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
