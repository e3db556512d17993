#!/usr/bin/env bash
# The official OpenAI Node SDK (tests/openai_sdk, installed by make deps),
# unchanged, against the default `make run` cluster: the GPT-OSS demo model
# with the o200k_harmony vocabulary. Text completion, chat (and streamed),
# a tool definition that gets a tool call (and streamed), and the follow-up
# with the tool's result, and parse() with strict tools under tool_choice
# "required" / a named function and a json_schema (tests/openai_sdk/check.mjs).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
name=gpt_oss_demo
dir=$BUILD/models/$name
vocab=vocab/gpt-tokenizer/data/o200k_base.tiktoken
if [ ! -d tests/openai_sdk/node_modules/openai ] || ! command -v node >/dev/null 2>&1; then
    not_ok "the OpenAI Node SDK is installed (make deps runs npm ci in tests/openai_sdk)"
    cluster_finish
fi
if [ ! -f "$dir/model.safetensors" ] || [ ! -f "$vocab" ]; then
    not_ok "$dir and $vocab exist (make demo-models, make deps)"
    cluster_finish
fi
# the workers get the vocabulary too: forced tool calls and json_schema mask on them
PREFILLER_FLAGS="--tokenizer $vocab" DECODER_FLAGS="--tokenizer $vocab" \
    cluster_start "$dir" --tokenizer "$vocab" || cluster_finish
while IFS= read -r line; do
    case "$line" in
    PASS$'\t'*) ok "OpenAI Node SDK: ${line#PASS$'\t'}" ;;
    FAIL$'\t'*)
        line=${line#FAIL$'\t'}
        not_ok "OpenAI Node SDK: ${line%%$'\t'*}" "${line#*$'\t'}"
        ;;
    *) echo "$line" ;;
    esac
done < <(timeout 120 node tests/openai_sdk/check.mjs "$URL/v1" "$name" 2>&1)
cluster_finish
