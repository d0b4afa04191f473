/* lf_encode.c -- one SFT example -> input ids and labels, as LLaMA-Factory's
 * SupervisedDatasetProcessor._encode_data_example with Template.encode_multiturn:
 *
 *   turn 0 = prefix + system(system or default_system, + tool prompt) + user; each message is rendered
 *   by its formatter and tokenized slot by slot; pairs (user|observation, assistant|function) are
 *   cut against the remaining budget by infer_seqlen; source tokens get -100 (unless
 *   train_on_prompt), target tokens keep their ids in EVERY turn (mask_history: only the last turn,
 *   which is then taken first so truncation keeps it).
 *
 * qwen3 (ReasoningTemplate): a response without <think> or </think> gets the ids of
 * "<think>\n\n</think>\n\n" in front (trained; enable_thinking false: appended to the prompt,
 * masked, and every thought removed first); with mask_history earlier thoughts are removed and only
 * the last turn gets the empty block (LF's discarding_history_cot).
 *
 * Vision templates first expand the `<image>` tags of every message (LF's mm_plugin.process_messages runs
 * before the template): their count must equal the example's images. After truncation every image's
 * <|image_pad|> run must still be whole, else the model would get more image features than positions. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"

void lf_infer_seqlen(int source_len, int target_len, int cutoff_len, int *src_out, int *tgt_out) {
    int max_target;
    if (target_len * 2 < cutoff_len) max_target = cutoff_len;               /* truncate the source only */
    else if (source_len * 2 < cutoff_len) max_target = cutoff_len - source_len; /* the target only */
    else max_target = (int)((double)cutoff_len * ((double)target_len / (double)(source_len + target_len)));
    int new_target = max_target < target_len ? max_target : target_len;
    int max_source = cutoff_len - new_target > 0 ? cutoff_len - new_target : 0;
    *src_out = max_source < source_len ? max_source : source_len;
    *tgt_out = new_target;
}

static int contains(const char *s, size_t n, const char *w) {
    size_t k = strlen(w);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, w, k) == 0) return 1;
    return 0;
}

/* re.sub("<think>\n(.*?)\n</think>\n\n", "", s, flags=DOTALL).lstrip("\n") into out. */
static void remove_thought(const char *s, size_t n, lf_buf *out) {
    static const char tw0[] = "<think>\n", tw1[] = "\n</think>\n\n";
    out->n = 0;
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n && memcmp(s + i, tw0, 8) == 0) {
            size_t j = i + 8, end = 0;
            for (; j + 11 <= n; j++)
                if (memcmp(s + j, tw1, 11) == 0) {
                    end = j + 11;
                    break;
                }
            if (end) {
                i = end;
                continue;
            }
        }
        lf_buf_putc(out, s[i++]);
    }
    size_t lead = 0;
    while (lead < out->n && out->p[lead] == '\n') lead++;
    if (lead) {
        memmove(out->p, out->p + lead, out->n - lead);
        out->n -= lead;
    }
    if (!out->p) lf_buf_put(out, "", 0);
}

static int append(tn_ids *v, const int32_t *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tn_ids_push(v, x[i]) != 0) return -1;
    return 0;
}

/* Message i of the example rendered to ids (turn 0 carries prefix and system). */
static int encode_message(const lf_template *t, const lf_example *e, const lf_msg *m, int i, lf_buf *sb, lf_buf *tmp,
                          tn_ids *out) {
    const lf_template_def *d = t->def;
    if (i == 0) {
        if (lf_fmt_encode(t, &d->prefix, "", 0, -1, sb, out) != 0) return -1;
        const char *sys = e->nsys ? e->system : d->default_system;
        size_t nsys = e->nsys ? e->nsys : strlen(d->default_system);
        if (nsys || e->ntools) {
            tmp->n = 0;
            lf_buf_put(tmp, sys, nsys);
            if (e->ntools && lf_tools_prompt(t, e->tools, e->ntools, tmp, e) != 0) return -1;
            if (lf_fmt_encode(t, &d->system, tmp->p, tmp->n, -1, sb, out) != 0) return -1;
        }
    }
    switch (m->role) {
    case LF_USER: return lf_fmt_encode(t, &d->user, m->s, m->n, i / 2, sb, out);
    case LF_ASSISTANT: return lf_fmt_encode(t, &d->assistant, m->s, m->n, -1, sb, out);
    case LF_OBSERVATION: return lf_fmt_encode(t, &d->observation, m->s, m->n, -1, sb, out);
    default:
        tmp->n = 0;
        if (lf_function_text(t, m->s, m->n, tmp, e) != 0) return -1;
        return lf_fmt_encode(t, &d->function, tmp->p ? tmp->p : "", tmp->n, -1, sb, out);
    }
}

/* mm_plugin.process_messages: the tags of all messages against the example's images, then expanded. */
static int expand_images(const lf_template *t, const lf_example *e, const int *img_tokens, lf_msg *msg, int n,
                         lf_buf *expanded) {
    int tags = 0;
    for (int i = 0; i < n; i++) tags += lf_count_image_tags(msg[i].s, msg[i].n);
    if (!t->def->vision) {
        if (e->n_img == 0) return 0;  /* LF's base plugin leaves <image> as text */
        return tn_err("%s: dataset '%s': record %d: %d image(s), but template '%s' takes no images (LLaMA-Factory: "
                      "\"This model does not support image input\"; use qwen2_vl, qwen3_vl or qwen3_vl_nothink)",
                      e->file, e->dsname, e->rec, e->n_img, t->def->name);
    }
    if (tags != e->n_img)
        return tn_err("%s: dataset '%s': record %d: %d <image> tag(s) in the messages but %d image(s)%s%s%s "
                      "(LLaMA-Factory needs one image per tag)", e->file, e->dsname, e->rec, tags, e->n_img,
                      e->n_img ? " (first: '" : "", e->n_img ? e->img_raw[0] : "", e->n_img ? "')" : "");
    int next = 0;
    for (int i = 0; i < n && tags; i++) {
        if (!lf_count_image_tags(msg[i].s, msg[i].n)) continue;
        lf_expand_image_tags(msg[i].s, msg[i].n, img_tokens, &next, &expanded[i]);
        msg[i].s = expanded[i].p, msg[i].n = expanded[i].n;
    }
    return 0;
}

/* Every image's run survived truncation (and no other text produced image pads). */
static int check_image_runs(const lf_template *t, int cutoff, const lf_example *e, const int *img_tokens,
                            const tn_ids *ids, size_t from) {
    if (t->image_pad_id < 0) return 0;
    int64_t want = 0, got = 0;
    for (int k = 0; k < e->n_img; k++) want += img_tokens[k];
    for (size_t i = from; i < ids->n; i++) got += ids->ids[i] == t->image_pad_id;
    if (got == want) return 0;
    if (got < want && want > 0)
        return tn_err("%s: dataset '%s': record %d: cutoff_len %d cuts its %lld image tokens to %lld (the model needs "
                      "every <|image_pad|> of an image; raise cutoff_len or lower image_max_pixels)", e->file, e->dsname,
                      e->rec, cutoff, (long long)want, (long long)got);
    return tn_err("%s: dataset '%s': record %d: %lld <|image_pad|> tokens for %d image(s) that need %lld (the text holds "
                  "<|image_pad|> itself)", e->file, e->dsname, e->rec, (long long)got, e->n_img, (long long)want);
}

int lf_encode_supervised(const lf_template *t, const lf_encode_opts *o, const lf_example *e, const int *img_tokens,
                         tn_ids *ids, tn_ids *labels) {
    int n = e->n_prompt + e->n_resp, rc = 0;
    size_t first = ids->n;
    lf_msg *msg = tn_xmalloc((size_t)n * sizeof *msg);
    memcpy(msg, e->msg, (size_t)n * sizeof *msg);
    tn_ids *enc = tn_xcalloc((size_t)n, sizeof *enc);
    lf_buf *thoughtless = tn_xcalloc((size_t)n, sizeof *thoughtless), *expanded = tn_xcalloc((size_t)n, sizeof *expanded);
    lf_buf sb = {0}, tmp = {0};
    if (expand_images(t, e, img_tokens, msg, n, expanded) != 0) n = 0, rc = -1;
    int reasoning = t->def->reasoning, discard = reasoning && o->mask_history;
    for (int i = 1; reasoning && i < n; i += 2) {
        if (t->enable_thinking && !(discard && i < n - 2)) continue;
        remove_thought(msg[i].s, msg[i].n, &thoughtless[i]);
        msg[i].s = thoughtless[i].p, msg[i].n = thoughtless[i].n;
    }
    for (int i = 0; i < n && rc == 0; i++) rc = encode_message(t, e, &msg[i], i, &sb, &tmp, &enc[i]);
    for (int i = discard ? n - 2 : 0; reasoning && rc == 0 && i < n; i += 2) {
        if (contains(msg[i + 1].s, msg[i + 1].n, "<think>") || contains(msg[i + 1].s, msg[i + 1].n, "</think>")) continue;
        if (!t->enable_thinking) {
            rc = append(&enc[i], t->think_ids, t->n_think);  /* in the prompt: no loss */
        } else {
            tn_ids both = {0};
            if (append(&both, t->think_ids, t->n_think) != 0 || append(&both, enc[i + 1].ids, enc[i + 1].n) != 0) rc = -1;
            tn_ids_free(&enc[i + 1]);
            enc[i + 1] = both;
        }
    }
    /* the turns in the order LF walks them (mask_history: last turn first) */
    int npairs = n / 2, total = 0;
    int *slen = tn_xcalloc((size_t)npairs, sizeof *slen), *tlen = tn_xcalloc((size_t)npairs, sizeof *tlen);
    int *order = tn_xcalloc((size_t)npairs, sizeof *order), used = 0;
    for (int k = 0; k < npairs && rc == 0; k++) {
        int p = o->mask_history ? npairs - 1 - k : k;
        if (total >= o->cutoff) break;
        lf_infer_seqlen((int)enc[2 * p].n, (int)enc[2 * p + 1].n, o->cutoff - total, &slen[k], &tlen[k]);
        total += slen[k] + tlen[k];
        order[used++] = p;
    }
    /* mask_history prepends each later-walked turn, so the output is in conversation order again */
    for (int q = 0; q < used && rc == 0; q++) {
        int k = o->mask_history ? used - 1 - q : q, p = order[k];
        const tn_ids *src = &enc[2 * p], *tgt = &enc[2 * p + 1];
        for (int j = 0; j < slen[k] && rc == 0; j++)
            rc = tn_ids_push(ids, src->ids[j]) || tn_ids_push(labels, o->train_on_prompt ? src->ids[j] : LF_IGNORE);
        int masked = o->mask_history && k != 0;
        for (int j = 0; j < tlen[k] && rc == 0; j++)
            rc = tn_ids_push(ids, tgt->ids[j]) || tn_ids_push(labels, masked ? LF_IGNORE : tgt->ids[j]);
    }
    if (rc == 0 && t->def->vision) rc = check_image_runs(t, o->cutoff, e, img_tokens, ids, first);
    for (int i = 0; i < e->n_prompt + e->n_resp; i++) tn_ids_free(&enc[i]), free(thoughtless[i].p), free(expanded[i].p);
    free(enc), free(thoughtless), free(expanded), free(msg), free(slen), free(tlen), free(order);
    free(sb.p), free(tmp.p);
    return rc ? -1 : 0;
}

int lf_encode_oneturn(const lf_template *t, int cutoff, const lf_example *e, const int *img_tokens, tn_ids *prompt,
                      tn_ids *label) {
    int n = e->n_prompt + 1, rc = 0;
    size_t first = prompt->n;
    lf_msg *msg = tn_xcalloc((size_t)n, sizeof *msg);
    memcpy(msg, e->msg, (size_t)e->n_prompt * sizeof *msg);
    msg[n - 1] = e->n_resp == 1 ? e->msg[e->n_prompt] : (lf_msg){.role = LF_ASSISTANT, .s = "", .n = 0};
    lf_buf *thoughtless = tn_xcalloc((size_t)n, sizeof *thoughtless), sb = {0}, tmp = {0};
    lf_buf *expanded = tn_xcalloc((size_t)n, sizeof *expanded);
    if (expand_images(t, e, img_tokens, msg, n, expanded) != 0) rc = -1; /* LF: process_messages, then the template */
    int reasoning = t->def->reasoning;
    for (int i = 1; reasoning && !t->enable_thinking && i < n - 2; i += 2) { /* LF: cot removed from the history */
        remove_thought(msg[i].s, msg[i].n, &thoughtless[i]);
        msg[i].s = thoughtless[i].p, msg[i].n = thoughtless[i].n;
    }
    tn_ids src = {0}, tgt = {0};
    for (int i = 0; i < n - 1 && rc == 0; i++) rc = encode_message(t, e, &msg[i], i, &sb, &tmp, &src);
    if (rc == 0) rc = encode_message(t, e, &msg[n - 1], n - 1, &sb, &tmp, &tgt);
    const lf_msg *last = &msg[n - 1];
    if (rc == 0 && reasoning && !contains(last->s, last->n, "<think>") && !contains(last->s, last->n, "</think>")) {
        if (!t->enable_thinking) {
            rc = append(&src, t->think_ids, t->n_think); /* the empty thought closes the prompt */
        } else {
            tn_ids both = {0};
            if (append(&both, t->think_ids, t->n_think) != 0 || append(&both, tgt.ids, tgt.n) != 0) rc = -1;
            tn_ids_free(&tgt);
            tgt = both; /* ... or opens the label */
        }
    }
    int ns = 0, nt = 0;
    if (rc == 0) {
        lf_infer_seqlen((int)src.n, (int)tgt.n, cutoff, &ns, &nt);
        rc = append(prompt, src.ids, (size_t)ns) || append(label, tgt.ids, (size_t)nt);
    }
    /* the model sees the prompt only: every image's run must be whole there */
    if (rc == 0 && t->def->vision) rc = check_image_runs(t, cutoff, e, img_tokens, prompt, first);
    tn_ids_free(&src), tn_ids_free(&tgt);
    for (int i = 0; i < n; i++) free(thoughtless[i].p), free(expanded[i].p);
    free(thoughtless), free(expanded), free(msg), free(sb.p), free(tmp.p);
    return rc ? -1 : 0;
}
