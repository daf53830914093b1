/*
 * The rotary embedding's frequencies as torch computes them
 * (vlm_rope.c): every family's default rope, the language models' and
 * the vision towers' 2D rope alike.
 */

#ifndef VLM_ROPE_H
#define VLM_ROPE_H


float vlm_rope_base_pow(double base, int i, int dim);
void vlm_rope_inv_freq(float *inv, double base, int dim);


#endif /* VLM_ROPE_H */
