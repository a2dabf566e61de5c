#!/usr/bin/env bash
# System packages the test suite uses beyond the virtualenv: an OpenSSH server, which the
# two-host tests (tests/distributed/test_two_hosts.py) start inside network namespaces.
#
# Idempotent, and never fails the set-up: as root, it installs what is missing with
# apt-get; otherwise, or where that is not possible, it says so and returns (those tests
# then skip with the reason).
set -uo pipefail

step() { printf '[setup-system %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if [[ -x /usr/sbin/sshd ]]; then
    exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
    step "openssh-server is not installed and this is not root: the two-host tests will skip."
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    step "openssh-server is not installed and there is no apt-get: the two-host tests will skip."
    exit 0
fi
step "installing openssh-server (for the two-host tests)"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends openssh-server iproute2; } >/dev/null; then
    step "could not install openssh-server: the two-host tests will skip."
fi
exit 0
