/* flash.h — the fused kernel's AVX2+FMA path (AVX-512F where the CPU has it,
 * the same bits): one fused job (sequence, KV head,
 * block of query rows; forward.h) computed with its own register-blocked
 * micro-kernels instead of one OpenBLAS call per tile. The r query heads' rows
 * become the columns of a transposed score tile (keys x queries), so the online
 * softmax runs eight queries per vector with no horizontal reductions and the
 * mixture P V accumulates in registers; Q is packed (and scaled) once per job,
 * K and V are read where they lie. attn__head_fused calls it when the CPU has
 * AVX2 and FMA and the job's masks are per key (no bool or float attn_mask):
 * key padding, key_length, causal and window. Library-internal. */
#ifndef ATTN_FLASH_H
#define ATTN_FLASH_H

#include "forward.h"

/* Test hook: nonzero keeps the AVX2 micro-kernels on a CPU with AVX-512F
 * (whose own kernels give the same bits). */
extern int attn__flash_no_avx512;

/* 1 when attn__flash_job can run a job of sequence s on this CPU. */
int attn__flash_applies(const attn_layer *l, const attn_seq *s);

/* Scratch floats attn__flash_job needs for any nt <= block_q (same arguments
 * as attn__fused_scratch_floats); 0 where the path cannot run (not compiled
 * in, no AVX2+FMA, d_v not a multiple of 8). */
size_t attn__flash_scratch_floats(int r, int block_q, int block_k, int d_k, int d_v, int gather);

/* The job, as attn__head_fused computes it (same contract: z may alias q,
 * a row with no visible key gets a zero mixture). attn__flash_applies must
 * hold. */
void attn__flash_job(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

#endif /* ATTN_FLASH_H */
