#!/usr/bin/env bash
# Dependency rules that `make lint` enforces (after nomad-autoscaler's check-sdk target):
#
#  1. bin/trident (./cmd/trident) must not link the testing package. Test helpers belong in
#     _test.go files or in packages only tests import (e2e/harness wraps internal/localcluster
#     for tests; the demo uses localcluster). Exception: github.com/hashicorp/raft, which the
#     planner needs, imports testing from its non-test testing.go (v1.7.3 and v1.8.0), so the
#     check fails on any *other* package of the binary's graph that imports testing.
#  2. The maths packages (and planner/admit, shared by the planner and the benchmark) must not
#     depend on Nomad, nomad-autoscaler, raft or NATS, directly or transitively, in their code
#     or their tests (go list -deps -test), so they stay usable and testable on their own.
#
# Exits 1 and prints the offending packages with an import chain when a rule is broken.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

BINARY_PKG=./cmd/trident
TESTING_ALLOWED='^github\.com/hashicorp/raft$'
MATHS_PKGS=(./apm/gp/... ./apm/observe/... ./strategy/cluster/... ./strategy/bo/...
	./strategy/configspace/... ./strategy/milp/... ./planner/admit/...)
FORBIDDEN='^github\.com/hashicorp/(nomad|raft)|^github\.com/nats-io/'

# chain ROOT TARGET prints the shortest import chain ROOT -> ... -> TARGET (non-test imports).
chain() {
	"$GO" list -deps -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' "$1" |
		awk -v target="$2" '
			{ imports[$1] = $0; root = $1 }  # -deps lists the root last
			END {
				queue[1] = root; head = 1; tail = 1; parent[root] = ""
				while (head <= tail) {
					p = queue[head++]
					if (p == target) break
					k = split(imports[p], f, " ")
					for (i = 2; i <= k; i++)
						if (!(f[i] in parent)) { parent[f[i]] = p; queue[++tail] = f[i] }
				}
				if (!(target in parent)) { print "    (only through its tests)"; exit }
				s = target
				for (p = parent[target]; p != ""; p = parent[p]) s = p " -> " s
				print "    " s
			}'
}

fail=0

echo "==> ${BINARY_PKG} must not link testing"
importers=$("$GO" list -deps -f '{{.ImportPath}}{{range .Imports}}{{if eq . "testing"}} IMPORTS_TESTING{{end}}{{end}}' "$BINARY_PKG" |
	awk '$2 == "IMPORTS_TESTING" { print $1 }')
bad=$(grep -Ev "$TESTING_ALLOWED" <<<"$importers" || true)
if [ -n "$bad" ]; then
	echo "    bin/trident links testing through these packages (move the test code to _test.go"
	echo "    files or to a package only tests import):"
	for p in $bad; do chain "$BINARY_PKG" "$p"; done
	fail=1
fi

echo "==> maths packages must not depend on Nomad, nomad-autoscaler, raft or NATS"
for pkg in $("$GO" list "${MATHS_PKGS[@]}"); do
	# -test adds the test variants' deps; strip the " [x.test]" variant suffixes.
	deps=$("$GO" list -deps -test "$pkg" | sed 's/ .*//' | sort -u | grep -E "$FORBIDDEN" || true)
	if [ -n "$deps" ]; then
		echo "    $pkg depends on:" $deps
		chain "$pkg" "$(head -n1 <<<"$deps")"
		fail=1
	fi
done

if [ "$fail" -ne 0 ]; then
	echo "check-deps: FAILED"
	exit 1
fi
echo "check-deps: ok"
