/* lf_chat.c -- chat prompts through LLaMA-Factory's templates, for generation. See lf_dataset.h.
 *
 * The prompt is what training puts before an assistant answer: the conversation is encoded as an SFT
 * example whose last (assistant) answer is empty, and the prompt is everything before its first trained
 * token, so generation sees exactly the ids training saw. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_dataset.h"
#include "data/lf_internal.h"

struct lf_chat {
    lf_template t;
};

lf_chat *lf_chat_open(const char *template_name, const tn_tokenizer *tok, const char *tokenizer_path,
                      int enable_thinking) {
    lf_chat *c = tn_xcalloc(1, sizeof *c);
    if (lf_template_init(&c->t, template_name, tok, tokenizer_path, enable_thinking) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void lf_chat_close(lf_chat *c) {
    if (!c) return;
    lf_template_free(&c->t);
    free(c);
}

int32_t lf_chat_eos(const lf_chat *c) { return c->t.eos_id; }

int lf_chat_prompt(const lf_chat *c, const char *system, const char *const *turns, int n, tn_ids *out) {
    return lf_chat_prompt_mm(c, system, turns, n, NULL, 0, out);
}

int lf_chat_prompt_mm(const lf_chat *c, const char *system, const char *const *turns, int n, const int *img_tokens,
                      int n_img, tn_ids *out) {
    if (n < 1 || n % 2 == 0) return tn_err("chat: a prompt needs user and assistant turns alternating, ending with a user turn");
    lf_msg *msg = tn_xcalloc((size_t)n + 1, sizeof *msg);
    for (int i = 0; i < n; i++) msg[i] = (lf_msg){.role = i % 2 ? LF_ASSISTANT : LF_USER, .s = turns[i], .n = strlen(turns[i])};
    msg[n] = (lf_msg){.role = LF_ASSISTANT, .s = "", .n = 0};
    const char *sys = system && *system ? system : "";
    const char **names = tn_xcalloc((size_t)n_img + 1, sizeof *names);
    for (int k = 0; k < n_img; k++) names[k] = "--image";
    lf_example e = {.msg = msg, .n_prompt = n, .n_resp = 1, .system = sys, .nsys = strlen(sys), .tools = "",
                    .file = "chat", .rec = 0, .dsname = "chat", .n_img = n_img, .img = names, .img_raw = names};
    lf_encode_opts o = {.cutoff = 1 << 30};
    tn_ids ids = {0}, labels = {0};
    int rc = lf_encode_supervised(&c->t, &o, &e, n_img ? img_tokens : NULL, &ids, &labels);
    if (rc == 0) {
        size_t k = 0;
        while (k < labels.n && labels.ids[k] == LF_IGNORE) k++;
        for (size_t i = 0; i < k; i++) tn_ids_push(out, ids.ids[i]);
    }
    tn_ids_free(&ids);
    tn_ids_free(&labels);
    free(msg), free(names);
    return rc;
}
