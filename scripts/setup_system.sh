#!/usr/bin/env bash
# System packages the test suite uses beyond the virtualenv:
#   - an OpenSSH server, which the two-host tests (tests/distributed/test_two_hosts.py) start
#     inside network namespaces;
#   - Chromium and its WebDriver, which the web page's browser tests (tests/ui/test_browser.py)
#     drive headless;
#   - a PostgreSQL server, of which the store's tests start throwaway clusters of their own
#     (tests/support/postgres.py); the package's own cluster is neither made nor started.
#
# Idempotent, and never fails the set-up: as root, it installs what is missing with
# apt-get; otherwise, or where that is not possible, it says so and returns. The two-host
# tests then skip with the reason; the browser and PostgreSQL tests skip too, except under
# CI (CI=true), where they fail, saying what is missing.
set -uo pipefail

step() { printf '[setup-system %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

missing=()
[[ -x /usr/sbin/sshd ]] || missing+=(openssh-server iproute2)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
[[ -x /usr/bin/chromedriver ]] || missing+=(chromium-driver)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)

if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
    step "${missing[*]} not installed and this is not root: the tests that need them will skip."
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    step "${missing[*]} not installed and there is no apt-get: the tests that need them will skip."
    exit 0
fi
step "installing ${missing[*]} (for the two-host, browser and PostgreSQL tests)"
export DEBIAN_FRONTEND=noninteractive
# The tests make clusters of their own: the package makes no cluster of its own and starts
# no service while it installs.
mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/det-estimator.conf
made_policy=""
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
fi
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null; then
    step "could not install ${missing[*]}: the tests that need them will skip (the browser and PostgreSQL tests fail under CI)."
fi
[[ -z "$made_policy" ]] || rm -f /usr/sbin/policy-rc.d
exit 0
