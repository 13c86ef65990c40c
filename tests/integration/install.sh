#!/usr/bin/env bash
# `make install DESTDIR=... PREFIX=/usr` into a staging directory: nothing is
# rebuilt, exactly the expected files are installed with their modes, the
# binaries are the built ones and run, the units and man pages carry /usr
# paths; `systemd-analyze verify` passes on the installed units (their
# ExecStart pointed at the staged binary, man pages found in the staging
# directory) and fails on a broken copy; the man pages render with `man -l`
# without groff or mandoc warnings and name every option of `latentd --help`
# and every command of `latent --help`; a re-install keeps an edited config;
# `make uninstall` removes everything but an edited config.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
dest=$tmp/root
# A make of its own (not the jobserver of a `make test` above us).
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$root" --no-print-directory "$@"; }

if ! mk -q all; then
    echo "note: the build is not up to date; building first"
    mk all >/dev/null || { echo "FAIL: make all"; exit 1; }
fi
touch "$tmp/marker"
sleep 1  # mtimes of files made after this are newer than the marker even on coarse clocks
check "make install DESTDIR PREFIX=/usr" bash -c "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C '$root' --no-print-directory install DESTDIR='$dest' PREFIX=/usr > '$tmp/install.out' 2>&1 || { tail -n 20 '$tmp/install.out'; false; }"
check "nothing rebuilt by install" bash -c "
    out=\$(find '$root/build' -path '$root/build/test-logs' -prune -o -type f -newer '$tmp/marker' -print); [ -z \"\$out\" ] || { echo \"\$out\"; false; }"

# --- the files -------------------------------------------------------------------------------
{
    printf '%s\n' /usr/bin/latent /usr/bin/latent-bench /usr/sbin/latentd \
        /usr/lib/systemd/system/latentd.service /usr/lib/systemd/system/latentd.socket /etc/latentd/latentd.conf \
        /usr/share/man/man1/latent.1 /usr/share/man/man5/latentd.conf.5 /usr/share/man/man8/latentd.8 \
        /usr/share/doc/latentd/README.md /usr/share/doc/latentd/examples/latentd.conf \
        /usr/share/doc/latentd/examples/nginx-latentd.conf /usr/share/doc/latentd/examples/nginx-latentd-scaleout.conf
    for f in "$root"/docs/*.md; do echo "/usr/share/doc/latentd/${f##*/}"; done
    # the MPI plugin, where it was built (make test builds it)
    [ -f "$build/latent-mpi.so" ] && echo /usr/lib/latentd/latent-mpi.so
} | sort > "$tmp/expected"
(cd "$dest" && find . -type f -o -type l) | sed 's|^\.||' | sort > "$tmp/installed"
echo "installed:"; sed 's/^/    /' "$tmp/installed"
check "exactly the expected files" diff "$tmp/expected" "$tmp/installed"
check "modes: 755 binaries, 644 the rest" bash -c "cd '$dest' &&
    [ \"\$(stat -c %a usr/bin/latent usr/bin/latent-bench usr/sbin/latentd | sort -u)\" = 755 ] &&
    [ \"\$(find . -type f ! -path './usr/bin/*' ! -path './usr/sbin/*' -exec stat -c %a {} + | sort -u)\" = 644 ]"
check "binaries are the built ones" bash -c "cmp '$build/latent' '$dest/usr/bin/latent' && cmp '$build/latent-bench' '$dest/usr/bin/latent-bench' && cmp '$build/latentd' '$dest/usr/sbin/latentd'"
check "installed binaries run" bash -c "'$dest/usr/sbin/latentd' --version | grep -q '^latentd ' && '$dest/usr/bin/latent' --help | grep -q 'usage: latent'"
check "units: ExecStart and Documentation for PREFIX=/usr" bash -c "u='$dest/usr/lib/systemd/system';
    grep -qx 'ExecStart=/usr/sbin/latentd --config /etc/latentd/latentd.conf' \$u/latentd.service &&
    grep -q '^Documentation=man:latentd(8) file:///usr/share/doc/latentd/deployment.md' \$u/latentd.service &&
    [ -f '$dest/usr/share/doc/latentd/deployment.md' ] && grep -qx 'ListenStream=127.0.0.1:8080' \$u/latentd.socket"
check "no /usr/local left in the installed units and man pages (comments aside)" bash -c "
    ! grep -rn /usr/local '$dest/usr/lib/systemd' '$dest/usr/share/man' | grep -v ':[0-9]*:\(#\|\.\\\\\"\)'"

# --- systemd-analyze verify ---------------------------------------------------------------------
# The units name /usr/sbin/latentd, which is in the staging directory, not on
# this machine: verify copies whose ExecStart points there. Documentation=
# man:latentd(8) is checked with `man`, which finds the staged page through MANPATH.
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$tmp/verify" "$tmp/broken"
    for u in latentd.service latentd.socket; do
        sed "s|^ExecStart=/usr/sbin/latentd|ExecStart=$dest/usr/sbin/latentd|" "$dest/usr/lib/systemd/system/$u" > "$tmp/verify/$u"
        sed "s|^ExecStart=/usr/sbin/latentd|ExecStart=$tmp/nowhere/latentd|; s|^ListenStream=|ListenStrem=|" \
            "$dest/usr/lib/systemd/system/$u" > "$tmp/broken/$u"
    done
    verify() { MANPATH=$dest/usr/share/man systemd-analyze verify "$1/latentd.socket" "$1/latentd.service"; }
    check "systemd-analyze verify: the installed units, no warnings" bash -c "$(declare -f verify); dest='$dest';
        out=\$(verify '$tmp/verify' 2>&1); rc=\$?; [ \$rc = 0 ] && [ -z \"\$out\" ] || { echo \"exit \$rc: \$out\"; false; }"
    check "systemd-analyze verify fails on a broken copy (missing binary, misspelt key)" bash -c "$(declare -f verify); dest='$dest';
        out=\$(verify '$tmp/broken' 2>&1); rc=\$?; [ \$rc != 0 ] && grep -q 'nowhere/latentd' <<<\"\$out\" && grep -q ListenStrem <<<\"\$out\" || { echo \"exit \$rc: \$out\"; false; }"
    check "the unit's Documentation=man: names an installed page" bash -c "MANPATH='$dest/usr/share/man' man -w 8 latentd | grep -qx '$dest/usr/share/man/man8/latentd.8'"
else
    echo "skip systemd-analyze is not installed (package systemd)"
fi

# --- man pages ---------------------------------------------------------------------------------
for page in man1/latent.1 man5/latentd.conf.5 man8/latentd.8; do
    f=$dest/usr/share/man/$page
    check "man -l $page renders" bash -c "MANPAGER=cat MANWIDTH=80 man -l '$f' > '$tmp/${page##*/}.txt' 2> '$tmp/man.err' &&
        [ ! -s '$tmp/man.err' ] && grep -q '^NAME' '$tmp/${page##*/}.txt' && grep -q '^SEE ALSO' '$tmp/${page##*/}.txt' || { cat '$tmp/man.err'; false; }"
    check "groff -ww -z -man $page: no warnings" bash -c "out=\$(groff -ww -z -man '$f' 2>&1); [ -z \"\$out\" ] || { echo \"\$out\"; false; }"
    if command -v mandoc >/dev/null; then
        check "mandoc -T lint $page: nothing to report" bash -c "out=\$(mandoc -T lint '$f' 2>&1); [ -z \"\$out\" ] || { echo \"\$out\"; false; }"
    fi
done
# Every option of latentd --help in latentd(8), every setting in latentd.conf(5).
opts=$("$build/latentd" --help | sed -n 's/^  --\([a-z-]*\) [A-Z].*/\1/p')
check "latentd(8) documents every option of latentd --help ($(wc -w <<<"$opts"))" bash -c "
    for o in $(tr '\n' ' ' <<<"$opts") help version; do grep -Eq -- \"^ *(-h, )?--\$o\\b\" '$tmp/latentd.8.txt' || { echo \"missing --\$o\"; exit 1; }; done"
check "latentd.conf(5) documents every setting" bash -c "
    for o in $(grep -vx config <<<"$opts" | tr '\n' ' '); do grep -q -- \"^ *\$o [A-Z]\" '$tmp/latentd.conf.5.txt' || { echo \"missing \$o\"; exit 1; }; done"
cmds=$("$build/latent" --help | sed -n 's/^  \([a-z-]*\)  .*/\1/p')
check "latent(1) documents every command of latent --help ($(wc -w <<<"$cmds"))" bash -c "
    for c in $(tr '\n' ' ' <<<"$cmds"); do grep -q -- \"^ *\$c\\b\" '$tmp/latent.1.txt' || { echo \"missing \$c\"; exit 1; }; done"

# --- re-install and uninstall -----------------------------------------------------------------------
conf=$dest/etc/latentd/latentd.conf
echo "port = 9999" >> "$conf"
mk install DESTDIR="$dest" PREFIX=/usr > "$tmp/install2.out" 2>&1
check "re-install keeps an edited config" bash -c "grep -qx 'port = 9999' '$conf' && grep -q '^keeping $conf' '$tmp/install2.out'"
mk uninstall DESTDIR="$dest" PREFIX=/usr > "$tmp/uninstall.out" 2>&1
check "uninstall removes all but the edited config" bash -c "
    left=\$(cd '$dest' && find . -type f | sed 's|^\.||'); [ \"\$left\" = /etc/latentd/latentd.conf ] || { echo \"\$left\"; false; }"
cp "$root/etc/latentd.conf" "$conf"
mk uninstall DESTDIR="$dest" PREFIX=/usr > "$tmp/uninstall.out" 2>&1
check "uninstall of an unchanged config leaves no file, and no latentd directory" bash -c "
    left=\$(cd '$dest' && find . -type f -o -name '*latentd*'); [ -z \"\$left\" ] || { echo \"\$left\"; false; }"

finish
