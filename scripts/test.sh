#!/usr/bin/env bash
# The project's test command: installs what the tests need on a fresh machine, then
# runs the whole workspace's tests. `.ci/run` adds the format and lint gates and calls
# this script; on a developer machine it is all you need.
#
# Usage: scripts/test.sh [ARGS...]   (ARGS go to `cargo test --workspace`)
#
# What it installs, only when missing:
# - tmux: `ccare chat` is tested through a real terminal (crates/ccare/tests/it/chat.rs);
# - chromium and chromium-driver: the web UI is tested in a real headless browser
#   (crates/ccare-server/tests/it/ui.rs, through chromedriver);
# - a CJK font (fonts-wqy-microhei, ~5 MB; fonts-noto-cjk is ~60 MB): without one the
#   browser tests' Chinese screenshots show empty boxes instead of characters;
# - tzdata (the system's zoneinfo and zdump): time-context's zones are checked against
#   the system's tz database;
# - the DeepSeek-V4 tokenizer.json: the token meter's accuracy test compares against it
#   (scripts/fetch-tokenizer.sh).
# Debian packages come from apt-get (as root, else through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_updated=""
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  if [ -z "$apt_updated" ]; then
    $sudo apt-get update >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "$@" >/dev/null
}

if ! command -v tmux >/dev/null 2>&1; then
  echo "test.sh: installing tmux" >&2
  apt_install tmux
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "test.sh: installing chromium and chromium-driver" >&2
  apt_install chromium chromium-driver
fi
if [ -z "$(fc-list :lang=zh 2>/dev/null || true)" ]; then
  echo "test.sh: installing a CJK font (fonts-wqy-microhei)" >&2
  apt_install fontconfig fonts-wqy-microhei
fi
if ! command -v zdump >/dev/null 2>&1 || [ ! -d /usr/share/zoneinfo ]; then
  echo "test.sh: installing tzdata" >&2
  apt_install tzdata
fi

bash scripts/fetch-tokenizer.sh >/dev/null

if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo is required (rustup toolchain 1.95)" >&2
  exit 1
fi
cargo test --workspace "$@"
