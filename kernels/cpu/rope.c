/* Rotary position embedding on the CPU, HF's half-split form.
 *
 * The angle is the float32 product pos * inv_freq[i], as HF computes it (a
 * float32 matmul of inv_freq and the positions). Computing it in double
 * instead would move angles of large positions by up to ~1e-3 rad and miss
 * HF's logits; cos/sin of that float angle are then taken in double. */
#include <math.h>
#include "kernels/kn_check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/rope.h"
#include "common/status.h"

int kn_rope_cpu(float *x, const int32_t *pos, int n_tokens, int n_heads,
                int head_dim, const float *inv_freq, float attn_scale)
{
    static const char op[] = "kn_rope";
    for (int t = 0; t < n_tokens; t++)
        if (pos[t] < 0)
            return kn_arg_error(op, "token %d has negative position %d", t, (int)pos[t]);
    int half = head_dim / 2;
    #pragma omp parallel for schedule(static) if ((size_t)n_tokens * n_heads * head_dim > 16384)
    for (int t = 0; t < n_tokens; t++) {
        float p = (float)pos[t];
        for (int i = 0; i < half; i++) {
            float angle = p * inv_freq[i];
            float c = (float)(cos((double)angle) * attn_scale);
            float s = (float)(sin((double)angle) * attn_scale);
            for (int h = 0; h < n_heads; h++) {
                float *xh = x + ((size_t)t * n_heads + h) * head_dim;
                float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * c - x1 * s;
                xh[i + half] = x1 * c + x0 * s;
            }
        }
    }
    return TN_OK;
}
