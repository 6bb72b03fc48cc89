#!/usr/bin/env bash
# Nothing built is tracked: fails on a tracked executable binary (ELF,
# Mach-O, PE, WebAssembly, or a file with the executable bit that is not
# a #! script) and on a tracked file over 1 MiB, unless the allow list
# below names it (data that must be large; none today). .gitignore keeps
# the programs this repository builds out of `git add`; this catches
# whatever slips past it.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

allow=() # paths of tracked files allowed over 1 MiB
limit=$((1 << 20))
bad=()
while IFS= read -r -d '' entry; do
  mode=${entry%% *}
  path=${entry#*$'\t'}
  [ -f "$path" ] || continue # deleted in the work tree, or a submodule
  size=$(stat -c %s "$path")
  magic=$(head -c 4 "$path" | od -An -tx1 | tr -d ' \n')
  case $magic in
    7f454c46*) bad+=("$path: an ELF executable or object ($size bytes)") ;;
    4d5a*) bad+=("$path: a PE (Windows) executable ($size bytes)") ;;
    cffaedfe* | cefaedfe* | feedface* | feedfacf* | cafebabe*) bad+=("$path: a Mach-O binary ($size bytes)") ;;
    0061736d*) bad+=("$path: a WebAssembly module ($size bytes)") ;;
    *)
      if [ "$mode" = 100755 ] && [ "${magic:0:4}" != 2321 ]; then
        bad+=("$path: executable (mode 755) but not a #! script")
      elif [ "$size" -gt "$limit" ] && [[ ! " ${allow[*]} " =~ " $path " ]]; then
        bad+=("$path: $size bytes, over 1 MiB (a build output? if it is data that must be large, add it to the allow list in scripts/check-tree.sh)")
      fi
      ;;
  esac
done < <(git ls-files -s -z)

if [ ${#bad[@]} -gt 0 ]; then
  echo "tracked files that look built, not written (remove them with git rm --cached, and add them to .gitignore):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "no tracked binary, no tracked file over 1 MiB"
