/* A request's stored logprobs (router_request.out_lp) as the API writer
 * takes them (openai_api.h api_lp_token): token texts from the codec and,
 * for completions, each token's text_offset.
 *
 * Which tokens are listed: every generated token, except that with a chat
 * format (reasoning, tool calls) only the tokens that added content text
 * are: OpenAI's chat logprobs describe "content". */
#ifndef TANDEM_ROUTER_LOGPROBS_VIEW_H
#define TANDEM_ROUTER_LOGPROBS_VIEW_H
#include "router/router.h"

typedef struct lp_view {
    api_lp_token *tokens;
    int n;
    api_lp_entry *entries;   /* the alternatives of every token */
    sbuf bytes;              /* every token's bytes */
} lp_view;

void lp_view_init(lp_view *v);
/* Fills v with r's tokens [from, to) (those listed, see above). Lock held;
 * v is valid until the next build or free. -1 on OOM. */
int lp_view_build(lp_view *v, const text_codec *codec, const router_request *r, int from, int to);
/* echo with logprobs: r's prompt tokens, the first without a logprob
 * (no_logprob), text_offset counting the characters of the prompt tokens
 * before each (as decoded); *chars: the characters of them all, by which
 * the generated tokens' offsets move. Lock held. -1 on OOM. */
int lp_view_build_prompt(lp_view *v, const text_codec *codec, const router_request *r,
                         long *chars);
void lp_view_free(lp_view *v);
#endif
