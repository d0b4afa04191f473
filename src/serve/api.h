/* api -- `tandem api CONFIG.yaml`: LLaMA-Factory's OpenAI-style API server (its `llamafactory-cli api`) on
 * serve/http.h.
 *
 * Routes: GET /v1/models; POST /v1/chat/completions with and without "stream": true (server-sent events ending
 * with `data: [DONE]`; with stream_options.include_usage a usage chunk first). Settings as LF reads them from the
 * environment: API_HOST (here 127.0.0.1 by default, LF 0.0.0.0), API_PORT (8000), API_KEY (a bearer token; unset:
 * no check), API_MODEL_NAME (gpt-3.5-turbo), MAX_CONCURRENT (sequences decoded together, default 8; LF: 1), and
 * tandem's API_MAX_QUEUE (requests waiting for a sequence, default 64; more get 429 with Retry-After),
 * API_MAX_BODY (bytes, default 1 MiB; more get 413), API_CONTEXT (tokens per sequence, prompt and answer, default
 * the model's max_position_embeddings up to 4096).
 *
 * Requests decode together: an engine thread runs one step for every running sequence, and a request that
 * arrives joins at the next step. The request maps as LF maps it (max_tokens or max_completion_tokens ->
 * max_new_tokens, temperature 0 -> greedy, presence_penalty > 0 -> repetition_penalty, LF's do_sample), plus
 * top_k and seed; the YAML's generation keys are the defaults. Messages follow LF's rules (an optional leading
 * system message, then user and assistant alternating, ending with user). Errors are OpenAI's error object. */
#ifndef TN_API_H
#define TN_API_H

int tn_api_main(int argc, char **argv);

#endif
