#!/usr/bin/env bash
# Regenerates the staging-module `replace` block of go.mod for one Kubernetes version.
# k8s.io/kubernetes replaces each staging module with a local path; replaces only apply in the
# main module, so we map every one of them to its published version (v1.X.Y -> v0.X.Y).
# Usage: ./gen-replace.sh v1.36.3   (then: go mod tidy)
set -euo pipefail
cd "$(dirname "$0")"
ver=${1:?usage: gen-replace.sh v1.X.Y}
staging=v0.${ver#v1.}
modfile=$(go mod download -json "k8s.io/kubernetes@${ver}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -s "$modfile" ] || { echo "gen-replace: no .mod file for k8s.io/kubernetes@${ver}" >&2; exit 1; }
block=$(grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" |
  awk -v v="$staging" '{printf "\t%s => %s %s\n", $1, $1, v}')
[ -n "$block" ] || { echo "gen-replace: no staging replaces found in $modfile" >&2; exit 1; }
# Drop the old generated block (between the markers) and append the new one.
awk '/^\/\/ BEGIN generated staging replaces/{skip=1} !skip{print} /^\/\/ END generated staging replaces/{skip=0}' go.mod > go.mod.tmp
{
  cat go.mod.tmp
  echo "// BEGIN generated staging replaces (gen-replace.sh ${ver})"
  echo "replace ("
  echo "$block"
  echo ")"
  echo "// END generated staging replaces"
} > go.mod
rm go.mod.tmp
echo "gen-replace: $(echo "$block" | wc -l) staging modules mapped to ${staging}"
