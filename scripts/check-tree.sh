#!/usr/bin/env bash
# Nothing built is tracked: fails on a tracked executable binary (ELF,
# Mach-O, PE, WebAssembly, a static archive, or a file with the executable bit that is not
# a #! script) and on a tracked file over 1 MiB, unless the allow list
# below names it (data that must be large; none today). It reads what is
# committed or staged (the index), not the work tree; a tracked symbolic
# link is a link, not a file. .gitignore keeps the programs this
# repository builds out of `git add`; this catches whatever slips past it.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

exec python3 - <<'PY'
import subprocess, sys

ALLOW = set()  # paths of tracked files allowed over 1 MiB
LIMIT = 1 << 20
MAGIC = [(b"\x7fELF", "an ELF executable or object"), (b"!<arch>\n", "a static archive (ar)"),
         (b"\xcf\xfa\xed\xfe", "a Mach-O binary"), (b"\xce\xfa\xed\xfe", "a Mach-O binary"),
         (b"\xfe\xed\xfa\xce", "a Mach-O binary"), (b"\xfe\xed\xfa\xcf", "a Mach-O binary"),
         (b"\xca\xfe\xba\xbe", "a Mach-O (or Java) binary"), (b"\x00asm", "a WebAssembly module")]

def is_pe(data):
    """An MZ header whose e_lfanew points at a PE signature (not text that
    happens to begin with "MZ")."""
    if not data.startswith(b"MZ") or len(data) < 0x40:
        return False
    at = int.from_bytes(data[0x3C:0x40], "little")
    return data[at:at + 4] == b"PE\0\0"

entries = []
for rec in subprocess.run(["git", "ls-files", "-s", "-z"], check=True, capture_output=True).stdout.split(b"\0"):
    if not rec:
        continue
    meta, path = rec.split(b"\t", 1)
    mode, obj, _ = meta.split()
    if mode in (b"120000", b"160000"):  # a symbolic link, a submodule
        continue
    entries.append((mode, obj, path.decode("utf-8", "replace")))

# Every blob through one git process: its size and its first bytes.
cat = subprocess.Popen(["git", "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
cat.stdin.write(b"".join(obj + b"\n" for _, obj, _ in entries))
cat.stdin.close()
bad = []
for mode, obj, path in entries:
    header = cat.stdout.readline().split()
    size = int(header[2])
    data = cat.stdout.read(size)
    cat.stdout.read(1)  # the newline after each blob
    what = next((w for m, w in MAGIC if data.startswith(m)), None)
    if what is None and is_pe(data):
        what = "a PE (Windows) executable"
    if what:
        bad.append(f"{path}: {what} ({size} bytes)")
    elif mode == b"100755" and not data.startswith(b"#!"):
        bad.append(f"{path}: executable (mode 755) but not a #! script")
    elif size > LIMIT and path not in ALLOW:
        bad.append(f"{path}: {size} bytes, over 1 MiB (a build output? if it is data that must be large, add it to ALLOW in scripts/check-tree.sh)")
cat.wait()
if bad:
    print("tracked files that look built, not written (remove them with git rm --cached, and add them to .gitignore):")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print("no tracked binary, no tracked file over 1 MiB")
PY
