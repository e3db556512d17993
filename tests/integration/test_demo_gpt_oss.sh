#!/usr/bin/env bash
# The GPT-OSS demo model (models/demo/) through a real router + prefiller +
# decoder with the o200k_harmony vocabulary: chat answers with
# reasoning_content and content parsed from the model's own Harmony output, a
# get_weather tool call (streamed and not) with JSON arguments and
# finish_reason tool_calls, the follow-up that carries the tool's result, and
# text completions with max_tokens, stop strings and usage counts. Every
# answer's tokens equal tandem-generate's greedy tokens for the prompt
# tandem-chat-data renders (tests/integration/demo_checks.py).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/demo_lib.sh
demo_cluster_checks gpt_oss_demo vocab/gpt-tokenizer/data/o200k_base.tiktoken harmony
cluster_finish
