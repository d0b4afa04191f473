/* predict -- LLaMA-Factory's do_predict with predict_with_generate (`tandem train` with such a YAML, e.g. its
 * examples/extras/nlg_eval/llama3_lora_predict.yaml): generate an answer for every example of eval_dataset and
 * write output_dir/generated_predictions.jsonl and predict_results.json (merged into all_results.json) as LF does.
 *
 * Prompts and labels are LF's (UnsupervisedDatasetProcessor: data/lf_dataset.h lf_load_predict); the answer is
 * sampled with the YAML's generation keys (LF's defaults sample: do_sample true, temperature 0.95, top_p 0.7,
 * top_k 50, max_new_tokens 1024) and stops at the template's EOS, generation_config.json's eos ids and
 * tokenizer_config.json's additional special tokens (LF passes eos + those). Example i draws from seed + i, so
 * the predictions do not depend on the batch size or the number of ranks.
 *
 * Lines: {"prompt", "predict", "label"} as json.dumps(ensure_ascii=False): the prompt decoded with its special
 * tokens, predict and label without, in dataset order. Metrics: nlg_metrics.h, the mean over examples of the
 * per-example scores; predict_runtime (4 decimals) is the generation's wall time, samples and steps per second (3
 * decimals) use HF's steps = ceil(n / (per_device_eval_batch_size x ranks)).
 *
 * Under `tandem launch -n N` rank r takes a contiguous slice of the examples (per_device_eval_batch_size sequences
 * decoded together), and rank 0 gathers the slices in rank order and writes the files.
 *
 * Images (a VL model, a vision template): an example's images are prepared as training prepares them and its
 * <image> tags expanded (lf_load_predict), patchified when a slot starts it and prefilled with its prompt
 * (tn_gen_set_images), examples with and without images batched together. Its prompt line holds the expanded runs,
 * as LF's batch_decode of the processed input_ids does. A text model given images is one line before generating. */
#ifndef TN_PREDICT_H
#define TN_PREDICT_H

#include "comm/comm.h"
#include "config/train_config.h"

/* 0; -1 this rank failed (tn_errmsg); -2 another rank did. */
int tn_predict(const tn_train_config *cfg, tn_comm *comm);

#endif
