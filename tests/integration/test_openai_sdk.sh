#!/usr/bin/env bash
# The official OpenAI Node SDK (tests/openai_sdk, installed by `make deps`) makes
# typed calls with logprobs, top_logprobs, n, best_of, a list of prompts,
# the penalties, logit_bias, echo and structured outputs (parse with a
# json_schema, json_object) against a real cluster (router with
# --tokenizer bytes, prefiller, decoder; the gpt_oss_tiny fixture).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

if [ ! -d tests/openai_sdk/node_modules/openai ]; then
    not_ok "the OpenAI Node SDK is installed under tests/openai_sdk" "run: make deps (or: cd tests/openai_sdk && npm ci)"
    cluster_finish
fi
# the workers get the router's vocabulary too: structured outputs mask on them
PREFILLER_FLAGS="--tokenizer bytes" DECODER_FLAGS="--tokenizer bytes" \
    cluster_start tests/fixtures/gpt_oss_tiny --tokenizer bytes || cluster_finish
while IFS= read -r line; do
    case "$line" in
        "ok - "*) ok "SDK: ${line#ok - }" ;;
        "not ok - "*) not_ok "SDK: ${line#not ok - }" ;;
        *) not_ok "SDK output" "$line" ;;
    esac
done < <(timeout 120 node tests/openai_sdk/sdk_calls.mjs "$URL/v1" gpt_oss_tiny 2>&1)
cluster_finish
