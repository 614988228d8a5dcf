#!/usr/bin/env bash
# check-deps.sh — a user pays only for what they import.
#
# 1. The library's go.mod requires no test tooling: the fault proxy
#    (toxiproxy), browser tests (chromedp), the Kubernetes API types of the
#    manifests test (k8s.io) and what they pull in live in the
#    systest module, the cron oracle (robfig/cron) in crosscheck.
# 2. A fresh Redis-only program (tasklock + redisstore, go mod tidy) has
#    none of them in its go.sum: go mod tidy also loads the tests of the
#    packages a program imports, so their imports count too.
# 3. The test modules (systest, crosscheck) test the library with the
#    versions its go.mod asks for, not newer ones their own requirements
#    would select.
#
# Usage: scripts/check-deps.sh [-v]   (-v prints the program's go.sum modules)
set -euo pipefail
export LC_ALL=C # so that sort orders lines as join compares first fields
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
fail=0
log() { printf 'check-deps: %s\n' "$*" >&2; }

testonly='k8s.io/|sigs.k8s.io/|github.com/Shopify/toxiproxy|github.com/chromedp/|github.com/rs/zerolog|github.com/gorilla/mux|go.uber.org/goleak|github.com/robfig/cron'

if grep -nE "^\s*($testonly)" go.mod; then
	log "the library's go.mod requires test tooling (above): move the test that needs it to systest/"
	fail=1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/main.go" <<'GO'
package main

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/redisstore"
)

func main() {
	store, err := redisstore.New(redis.NewClient(&redis.Options{}), nil)
	if err != nil {
		panic(err)
	}
	lk, err := tasklock.New(store, nil)
	if err != nil {
		panic(err)
	}
	defer lk.Close()
	_, _ = lk.TryObtain(context.Background(), "report", nil)
}
GO
cat >"$tmp/go.mod" <<GO
module example.com/redisonly

go 1.25

require github.com/tasklock/tasklock v0.0.0
replace github.com/tasklock/tasklock => $root
GO
(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod $GO mod tidy >/dev/null 2>"$tmp/tidy.err") || {
	cat "$tmp/tidy.err" >&2
	log "go mod tidy failed in a fresh Redis-only program"
	exit 1
}
mods=$(awk '{print $1}' "$tmp/go.sum" | sort -u)
log "a Redis-only program's go.sum lists $(wc -l <<<"$mods") modules"
[[ ${1:-} == -v ]] && printf '%s\n' "$mods"
if bad=$(grep -E "^($testonly)" <<<"$mods"); then
	log "test tooling in a Redis-only program's go.sum: $bad"
	fail=1
fi

# Every module in the library's go.mod must be selected at the same
# version in the test modules.
want=$(cd "$root" && $GO mod edit -json | awk -F'"' '/"Path"/{p=$4} /"Version"/{print p, $4}' | sort)
for m in systest crosscheck; do
	got=$(cd "$root/$m" && GOWORK=off $GO list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all | sort)
	if diff=$(join <(echo "$want") <(echo "$got") | awk '$2 != $3'); [[ -n $diff ]]; then
		log "$m selects other versions than the library's go.mod (module library $m):"
		echo "$diff" >&2
		fail=1
	fi
done
exit $fail
